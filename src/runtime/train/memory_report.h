// Memory per data-parallel rank by ZeRO stage (Rajbhandari et al., "ZeRO:
// Memory Optimizations Toward Training Trillion Parameter Models", 2020),
// for float32 training with Ψ parameters, K optimizer slots per parameter
// (SGD momentum: 1; AdamW exp_avg, exp_avg_sq: 2) and p ranks:
//
//   stage  parameters  gradients                     optimizer state
//   0      4Ψ          4Ψ (the buckets)              4KΨ
//   1      4Ψ          4Ψ + 4Ψ/p (buckets + shard)   4KΨ/p
//   2      4Ψ          4Ψ/p (shard)                  4KΨ/p
//   3      4Ψ/p        4Ψ/p (shard)                  4KΨ/p
//
// ZeRO-2/3 add at most LowerRequest::bucket_buffers gradient bucket
// buffers while backward runs, ZeRO-3 the parameter buckets gathered for
// use (a few buckets); activations (the executor's peak) come on top of all.
// Shards are block(bucket, p, rank) of every bucket, so a rank's share is
// Ψ/p give or take one element per bucket.
//
// Under tensor parallelism over T ranks, Ψ is the rank's model shard,
// Ψ_T = Ψ_split/T + Ψ_replicated (the split layers' 1/T plus the pieces
// every tensor-parallel rank holds whole: LayerNorms, row layers' biases,
// position embeddings), and p is the data-parallel ranks.
#pragma once

#include <cstdint>
#include <string>

namespace px {

struct RankMemory {  // bytes
  double parameters = 0, gradients = 0, optimizer_state = 0;
  double total() const { return parameters + gradients + optimizer_state; }
};

RankMemory expected_rank_memory(int zero_stage, int ranks, int slots, int64_t parameters);

// One log line: measured against the formula, and what stage 0 would hold.
std::string describe_rank_memory(int zero_stage, int ranks, int slots, int64_t parameters,
                                 const RankMemory& measured);

// Tensor parallelism's share: Ψ_T from the split and replicated counts.
struct TensorParallelShare {
  int64_t split = 0, replicated = 0;  // parameters (whole counts)
  int ranks = 1;                      // T
  double per_rank() const { return static_cast<double>(split) / ranks + static_cast<double>(replicated); }
};
std::string describe_tensor_parallel_share(const TensorParallelShare& share, int64_t measured);

}  // namespace px
