#include "gradient_buckets.h"

#include <algorithm>

#include "comm/engine/bucket_plan.h"
#include "core/error.h"

namespace px::bench {

GradientBuckets::GradientBuckets(CommEngine& engine, std::span<float> arena,
                                 std::vector<GradientSlot> grads, int64_t bucket_bytes,
                                 Reduction op, bool mix_priorities)
    : engine_(engine), arena_(arena), grads_(std::move(grads)), op_(op) {
  // Gradients must be arena neighbours to share a bucket (a bucket is one
  // contiguous range), and with separate priorities of equal priority.
  std::vector<int64_t> counts;
  std::vector<bool> starts(grads_.size(), false);
  for (int i = 0; i < static_cast<int>(grads_.size()); ++i) {
    const GradientSlot& g = grads_[i];
    if (g.offset < 0 || g.count < 0 || g.offset + g.count > static_cast<int64_t>(arena_.size()))
      fail("GradientBuckets: gradient '{}' spans elements [{}, {}) of an arena of {}", g.name,
           g.offset, g.offset + g.count, arena_.size());
    counts.push_back(g.count);
    if (i == 0) continue;
    const GradientSlot& prev = grads_[i - 1];
    const bool adjacent = g.offset == prev.offset + prev.count || g.offset + g.count == prev.offset;
    starts[i] = !adjacent || (!mix_priorities && g.priority != prev.priority);
  }
  for (const BucketSpan& span : plan_buckets(counts, bucket_bytes, starts)) {
    GradientBucket b{.name = {}, .offset = grads_[span.first].offset, .count = span.count, .first = span.first,
                     .last = span.last, .priority = grads_[span.first].priority};
    for (int i = span.first; i <= span.last; ++i) {
      b.offset = std::min(b.offset, grads_[i].offset);
      b.priority = std::min(b.priority, grads_[i].priority);
      bucket_of_.push_back(static_cast<int>(buckets_.size()));
    }
    buckets_.push_back(b);
  }
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    GradientBucket& bucket = buckets_[b];
    bucket.name = bucket.first == bucket.last
                      ? fmt::format("bucket {} ({})", b, grads_[bucket.first].name)
                      : fmt::format("bucket {} ({} .. {})", b, grads_[bucket.first].name,
                                    grads_[bucket.last].name);
  }
  ready_.assign(grads_.size(), false);
  missing_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b)
    missing_[b] = buckets_[b].last - buckets_[b].first + 1;
}

void GradientBuckets::ready(int index) {
  PX_CHECK(index >= 0 && index < static_cast<int>(grads_.size()), "gradient index {}", index);
  if (ready_[index]) fail("GradientBuckets: gradient '{}' marked ready twice in one step",
                          grads_[index].name);
  ready_[index] = true;
  --missing_[bucket_of_[index]];
  while (next_bucket_ < static_cast<int>(buckets_.size()) && missing_[next_bucket_] == 0) {
    const GradientBucket& b = buckets_[next_bucket_];
    jobs_.push_back(engine_.allreduce(arena_.subspan(b.offset, b.count), b.priority, b.name, op_));
    ++next_bucket_;
  }
}

void GradientBuckets::wait_for(int index) {
  const int b = bucket_of_.at(index);
  if (b >= next_bucket_)
    fail("GradientBuckets::wait_for: '{}' is in {}, not submitted yet (are all its gradients "
         "and those of earlier buckets marked ready?)",
         grads_[index].name, buckets_[b].name);
  engine_.wait(jobs_[b]);
}

void GradientBuckets::wait() {
  std::vector<std::string> never;
  for (size_t i = 0; i < grads_.size(); ++i)
    if (!ready_[i]) never.push_back(grads_[i].name);
  for (CommEngine::JobId id : jobs_) engine_.wait(id);
  if (!never.empty())
    fail("GradientBuckets::wait: gradients never marked ready this step: {}",
         fmt::join(never, ", "));
  jobs_.clear();
  next_bucket_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (size_t b = 0; b < buckets_.size(); ++b)
    missing_[b] = buckets_[b].last - buckets_[b].first + 1;
}

}  // namespace px::bench
