// One server's slice of the training state: parameters [begin, begin +
// count) of the flat parameter vector (every tensor in ParamStore order)
// and the Optimizer over the parameter shards inside it. A slice may cut
// tensors; each shard keeps its tensor's weight-decay flag, and the update
// rules are elementwise, so the slices together update exactly as one
// replica would.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/buffer.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/state/sharded_tensors.h"

namespace px::ps {

class ServerSlice {
 public:
  // `store` gives the initial (or resumed) values, `state` the checkpoint
  // to take the slice's optimizer state from (nullptr: fresh) after `steps`.
  ServerSlice(OptimizerConfig config, const ParamStore& store, const std::map<std::string, ParamRule>& rules,
              comm::Block slice, const ShardedTensors* state, int64_t steps);

  // One update: params -= lr * rule(gradient) with weight decay scaled by
  // `decay_scale` (a push's share of the global batch in asynchronous modes).
  void step(std::span<const float> gradient, double lr, double decay_scale);

  std::span<const float> params() const { return params_; }
  // Optimizer slot k over the slice (momentum | exp_avg, exp_avg_sq).
  std::vector<float> slot(size_t k) const;
  size_t slot_count() const { return optimizer_.slot_count(); }
  int64_t updates() const { return optimizer_.steps(); }
  comm::Block slice() const { return slice_; }

 private:
  comm::Block slice_;
  std::vector<int64_t> begin_;  // per optimizer shard: its first element in the slice
  std::vector<float> params_;   // (count)
  Optimizer optimizer_;
};

// The flat view of a ParamStore: each tensor's offset in ParamStore order.
std::vector<int64_t> flat_offsets(const ParamStore& store);

}  // namespace px::ps
