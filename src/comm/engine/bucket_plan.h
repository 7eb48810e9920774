// The one bucket rule, used by the lowering (parallel/lower/buckets.cc) and
// by the engine benchmark's GradientBuckets (bench/): gradients, in the order
// backward produces them, are taken into the current bucket until it holds
// at least `bucket_bytes`; the next gradient then opens a new one. A
// gradient larger than the size fills a bucket alone. Fewer, fuller
// buckets than "stay within the size": at 256 KiB that rule made buckets
// about half as big and real 2-rank steps ~5% slower (docs/data_parallel.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace px::comm {

struct BucketSpan {
  int first = 0, last = 0;  // gradient indices, inclusive
  int64_t count = 0;        // elements
};

// `counts`: elements of each gradient in ready order. bucket_bytes 0: one
// bucket per gradient. `starts_bucket[i]`, if given, forces gradient i to
// open a bucket (not adjacent in memory, or a priority that must stay apart).
std::vector<BucketSpan> plan_buckets(std::span<const int64_t> counts, int64_t bucket_bytes,
                                     const std::vector<bool>& starts_bucket = {});

}  // namespace px::comm
