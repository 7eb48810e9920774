// ZeRO stage 1: each data-parallel rank keeps the optimizer state of its
// shard of the flat gradient layout only (block(bucket, p, rank) of every
// bucket, see DataParallelStep::shard_pieces) and updates those parameter
// elements from its reduce-scattered gradients; the step then all-gathers
// the parameters. Optimizer state per rank: slots x ceil-ish(params / p)
// floats instead of slots x params.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "runtime/optimizer.h"
#include "runtime/param_store.h"

namespace px {

// A run of one parameter's elements inside this rank's shard.
struct ShardPiece {
  std::string name;          // parameter
  int64_t param_offset = 0;  // element offset in the parameter
  int64_t count = 0;
  int64_t shard_offset = 0;  // element offset in the rank's shard
  int64_t arena_offset = 0;  // element offset in the flat gradient layout
  bool decay = false;        // weight decay applies
};

class ShardedOptimizer {
 public:
  ShardedOptimizer(OptimizerConfig config, std::vector<ShardPiece> pieces, int64_t shard_count);
  // One update of every piece's parameter elements from the shard's gradients.
  void step(ParamStore& params, std::span<const float> grad_shard, double lr);
  int64_t steps() const { return steps_; }
  int64_t state_bytes() const;
  size_t slot_count() const { return slots_.size(); }
  std::span<const float> slot(size_t i) const { return {slots_[i].f32(), static_cast<size_t>(slots_[i].numel())}; }
  // Takes this shard's elements of a full saved state (checkpoint written at
  // any rank count); px::Error names a missing tensor.
  void load(const SafetensorsFile& file, int64_t steps);

 private:
  OptimizerConfig config_;
  std::vector<ShardPiece> pieces_;
  std::vector<Tensor> slots_;  // Tensors, so the memory tracker counts them
  int64_t steps_ = 0;
};

}  // namespace px
