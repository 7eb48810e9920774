// The run's log lines on memory per rank: the measured state against the
// memory ledger's (parallel/memory_ledger.h, state_bytes: by ZeRO stage),
// and tensor parallelism's share of the parameters.
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

// One log line: measured against the ledger, and what stage 0 would hold.
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
