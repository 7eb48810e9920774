// One server's slice of the training state: parameters [begin, begin + count)
// of the flat parameter vector (all tensors in ParamStore order) and the same
// slice of every optimizer slot, updated with the kernels of
// runtime/optimizer.h (SGD momentum, AdamW). A slice may cut tensors; each
// piece keeps its tensor's weight-decay flag, and the kernels are elementwise,
// so the slices together update exactly as Optimizer::step would.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/buffer.h"
#include "runtime/optimizer.h"

namespace px::ps {

class ShardOptimizer {
 public:
  // `store` gives the initial (or resumed) values; `full` the optimizer
  // state to slice (fresh zeros, or loaded from a checkpoint).
  ShardOptimizer(OptimizerConfig config, const ParamStore& store, const Optimizer& full,
                 const std::map<std::string, bool>& decays, comm::Block slice);

  // One update: params -= lr * rule(gradient) with weight decay scaled by
  // `decay_scale` (a push's share of the global batch in asynchronous modes).
  void step(std::span<const float> gradient, double lr, double decay_scale);

  std::span<const float> params() const { return params_; }
  // Optimizer slots in Optimizer::state() order: momentum | exp_avg, exp_avg_sq.
  const std::vector<std::vector<float>>& slots() const { return slots_; }
  int64_t updates() const { return updates_; }
  comm::Block slice() const { return slice_; }

 private:
  struct Piece {  // the part of one tensor inside the slice, in slice coordinates
    int64_t begin = 0, count = 0;
    bool decay = false;
  };
  OptimizerConfig config_;
  comm::Block slice_;
  std::vector<Piece> pieces_;
  std::vector<float> params_;                // (count)
  std::vector<std::vector<float>> slots_;    // (slots, count)
  int64_t updates_ = 0;
};

// The flat view of a ParamStore: each tensor's offset in ParamStore order.
std::vector<int64_t> flat_offsets(const ParamStore& store);
// Slot tensors per parameter in Optimizer::state() order (1 for sgd, 2 for adamw).
int slots_per_param(const OptimizerConfig& config);

}  // namespace px::ps
