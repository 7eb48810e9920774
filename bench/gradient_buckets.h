// GradientBuckets: fuses small gradients into buckets of about bucket_bytes
// and hands each bucket to a CommEngine as one allreduce as soon as all its
// gradients are ready (backward still computing the earlier layers). The
// engine benchmark's own driver (bench/comm_engine.cc): training gets its
// buckets, their order and their priorities from the lowering
// (parallel/lower/buckets.cc) as instructions of the Program.
//
// Buckets follow the one bucket rule (bucket_plan.h). Gradients live in one
// flat arena owned by the caller, so a bucket is a contiguous range of it
// and nothing is copied: gradients that follow each other in backward order
// must be neighbours in the arena (a forward-order layout works too, read
// backwards). A gradient that is not next to the previous one starts a new
// bucket; buckets are never split (the engine's slicing cuts big jobs).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/engine/comm_engine.h"

namespace px::bench {
using namespace px::comm;

struct GradientSlot {
  std::string name;
  int64_t offset = 0;  // elements, in the arena
  int64_t count = 0;
  // The bucket's priority is its members' minimum (P3: the layer index).
  int priority = 0;
  bool operator==(const GradientSlot&) const = default;
};

struct GradientBucket {
  std::string name;    // "bucket 2 (h.3.mlp.w .. h.2.attn.b)", equal on every rank
  int64_t offset = 0;  // elements, in the arena
  int64_t count = 0;
  int first = 0, last = 0;  // gradient indices (backward order), inclusive
  int priority = 0;
};

class GradientBuckets {
 public:
  // grads: in the order backward produces them; every rank passes the same
  // list. bucket_bytes 0: one bucket per gradient. mix_priorities false:
  // gradients of different priorities never share a bucket (P3: one layer's
  // small tensors fuse, layers stay apart so the next forward waits for its
  // own layer only).
  GradientBuckets(CommEngine& engine, std::span<float> arena, std::vector<GradientSlot> grads,
                  int64_t bucket_bytes, Reduction op = Reduction::sum,
                  bool mix_priorities = true);

  // Gradient `index` is final for this step. Submits, in bucket order, every
  // bucket whose gradients are all ready (bucket order, not readiness order,
  // so every rank submits the same jobs in the same order).
  void ready(int index);
  // Waits for the bucket holding gradient `index` (it must have been submitted).
  void wait_for(int index);
  // Waits for every bucket of this step and re-arms for the next. Throws
  // px::Error naming gradients never marked ready.
  void wait();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  int bucket_of(int index) const { return bucket_of_.at(index); }

 private:
  CommEngine& engine_;
  std::span<float> arena_;
  std::vector<GradientSlot> grads_;
  Reduction op_;
  std::vector<GradientBucket> buckets_;
  std::vector<int> bucket_of_;     // by gradient index
  std::vector<int> missing_;       // by bucket: gradients not yet ready this step
  std::vector<bool> ready_;        // by gradient index
  std::vector<CommEngine::JobId> jobs_;  // by bucket, submitted this step
  int next_bucket_ = 0;            // first bucket not yet submitted this step
};

}  // namespace px::bench
