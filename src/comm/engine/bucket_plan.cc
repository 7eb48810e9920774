#include "comm/engine/bucket_plan.h"

#include "core/error.h"

namespace px::comm {

std::vector<BucketSpan> plan_buckets(std::span<const int64_t> counts, int64_t bucket_bytes,
                                     const std::vector<bool>& starts_bucket) {
  PX_CHECK(starts_bucket.empty() || starts_bucket.size() == counts.size(), "starts_bucket has {} flags for {} gradients",
           starts_bucket.size(), counts.size());
  const int64_t bucket_elements = bucket_bytes / static_cast<int64_t>(sizeof(float));
  std::vector<BucketSpan> buckets;
  for (int i = 0; i < static_cast<int>(counts.size()); ++i) {
    const bool forced = !starts_bucket.empty() && starts_bucket[static_cast<size_t>(i)];
    if (buckets.empty() || bucket_elements == 0 || forced || buckets.back().count >= bucket_elements)
      buckets.push_back({.first = i, .last = i, .count = 0});
    buckets.back().last = i;
    buckets.back().count += counts[static_cast<size_t>(i)];
  }
  return buckets;
}

}  // namespace px::comm
