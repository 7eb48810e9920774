// The memory ledger: how a rank's memory is counted, once, for everyone who
// counts it. The executor counts the activations of the step it runs with
// it, the planner (plan/memory.cc, and through it the replay and the memory
// guard) counts a Program's without running it, the stage search and the
// run's memory report count the persistent state per rank with it.
//
// Three counts:
// - ActivationLedger: the activations alive at each point of a walk over a
//   Program's instructions, by storage. A value's bytes live in a storage;
//   a view (reshape) shares its input's, which stays alive until the value
//   and all its views are dead.
// - micro_batch_stash_bytes: what one micro-batch keeps from its forward for
//   its backward (the pipeline schedules' stash).
// - state_bytes: parameters, working copy, gradients and optimizer state
//   per rank by ZeRO stage (Rajbhandari et al., "ZeRO", 2020).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "parallel/lower/liveness.h"
#include "parallel/program.h"

namespace px::parallel {

class ActivationLedger {
 public:
  // A step begins: `values[m]` value ids in micro-batch m's local graph
  // (0: the micro-batch has no rows). Nothing is alive.
  void reset(const std::vector<size_t>& values);
  // The values of every micro-batch of `program`, for reset.
  static std::vector<size_t> values_of(const Program& program);

  // `v` now holds storage of its own of `bytes` (an instance made again,
  // as recomputation does, drops the old one first). `forward`: made by a
  // forward node (or received from an earlier stage's forward).
  void produce(int micro, ValueId v, double bytes, bool forward);
  // `view` shares `base`'s storage (nothing when `base` holds none: a
  // parameter or a fed input).
  void alias(int micro, ValueId view, ValueId base);
  // `v` is dead; returns the bytes freed (its storage's, when `v` was its
  // last holder, else 0).
  double drop(int micro, ValueId v);

  double bytes() const { return bytes_; }  // alive now
  double forward_bytes() const { return forward_; }  // of them, made by forward
  double peak() const { return peak_; }
  double forward_peak() const { return forward_peak_; }

 private:
  // Per micro-batch and value: the value whose storage it holds (kNoValue:
  // none), and for a storage's own value its bytes, holders and origin.
  struct Micro {
    std::vector<ValueId> storage;
    std::vector<double> bytes;
    std::vector<int> holders;
    std::vector<bool> forward;
  };
  void change(double bytes, bool forward);
  std::vector<Micro> micro_;
  double bytes_ = 0, forward_ = 0, peak_ = 0, forward_peak_ = 0;
};

// Bytes of one micro-batch's activations a rank keeps from its forward for
// its backward: storage made (or received from an earlier stage) before
// the micro-batch's backward began whose last holder a backward node
// frees. The first micro-batch with rows; 0 without one.
int64_t micro_batch_stash_bytes(const Program& program, const Liveness& liveness);

// An allgather runs from a copy of its input, in the output's dtype, when
// the input lies in the output's buffer (ZeRO-1/2's updated parameters:
// this rank's block of the bucket itself) or the output is bf16 (rounded
// before it travels); the copy lives until the gather is done. Its bytes,
// or 0: gathered from where it is (ZeRO-3's float32 shard). The executor
// stages by this rule, and the planner counts it.
int64_t gather_staging_bytes(const Program& program, const Collective& gather);

// A rank's persistent state, in bytes.
struct StateBytes {
  double parameters = 0;     // float32 masters (ZeRO-3: this rank's shard)
  double gradients = 0;      // float32: the buckets and/or this rank's shard
  double optimizer_state = 0;  // float32, `slots` per parameter
  double total() const { return parameters + gradients + optimizer_state; }
};

// Ψ = `parameters` (a rank's model shard) over `data_ranks` ranks at ZeRO
// `zero_stage`, K = `optimizer_slots` (SGD momentum 1, AdamW 2):
//
//   stage  parameters  gradients                     optimizer state
//   0      4Ψ          4Ψ (the buckets)              4KΨ
//   1      4Ψ          4Ψ + 4Ψ/p (buckets + shard)   4KΨ/p
//   2      4Ψ          4Ψ/p (shard)                  4KΨ/p
//   3      4Ψ/p        4Ψ/p (shard)                  4KΨ/p
//
// Mixed precision keeps no working copy (bf16 GEMMs round their fp32
// operands). ZeRO-2/3's bucket buffers alive while backward runs and
// ZeRO-3's gathered parameters come on top.
StateBytes state_bytes(double parameters, int zero_stage, int data_ranks, int optimizer_slots);

}  // namespace px::parallel
