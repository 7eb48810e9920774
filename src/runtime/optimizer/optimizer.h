// The optimizer: SGD with momentum and AdamW with torch's exact update rules
// (kernels/optimizer.h), over *parameter shards*. A shard is a run of one
// parameter's elements; a full replica is one whole shard per parameter, a
// ZeRO rank holds the pieces of its blocks, a parameter server its slice.
// The rules are elementwise, so any sharding updates exactly as one replica
// would. State per slot is one flat tensor over the shards (tracked by the
// memory tracker). Checkpoints save each shard's state as a run of the
// tensor "<param>.momentum" / "<param>.exp_avg" / "<param>.exp_avg_sq" with
// its place in the whole (checkpoint.h), so they load into any sharding.
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "plan/job_strategy.h"
#include "runtime/optimizer/lr_schedule.h"
#include "runtime/state/param_store.h"

namespace px {

struct OptimizerConfig {
  std::string kind = "adamw";  // "sgd" or "adamw"
  double momentum = 0.9;       // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
  double weight_decay = 0.0;   // applied to params marked for decay
  bool operator==(const OptimizerConfig&) const = default;
};

void validate(const OptimizerConfig& config);

// How a run optimizes: the optimizer room's part of a job.
struct OptimizerOptions {
  OptimizerConfig update;  // the rule each step applies
  LrSchedule schedule;     // schedule.total is filled from the run's steps or epochs
  double grad_clip = 0;    // global-norm clip; 0 = off
  bool operator==(const OptimizerOptions&) const = default;
};

// The update rule, the schedule and the clip, each checked (px::Error naming the option).
void validate(const OptimizerOptions& options);
// What composing a strategy asks of the optimizer (plan::strategy_for):
// the clip, and SGD's momentum (0 for another optimizer).
plan::RunUse run_use(const OptimizerOptions& options);
// Names of an optimizer's per-parameter state tensors: sgd {"momentum"},
// adamw {"exp_avg", "exp_avg_sq"}; saved as "<param>.<slot>".
std::vector<std::string> optimizer_slot_names(const std::string& kind);

// Elements [offset, offset + count) of parameter `name` (of shape `shape`).
struct ParamShard {
  std::string name;
  Shape shape;  // the whole parameter's
  int64_t offset = 0;
  int64_t count = 0;
  bool decay = false;  // weight decay applies
  // > 0: the shard moves by this rate against its gradient's sign (no
  // decay, no state, no learning rate), not by the optimizer's rule.
  double sign_rate = 0;
  bool operator==(const ParamShard&) const = default;
};

// How each of a graph's parameters is updated, by name: its decay flag and
// sign rate (graph/graph.h's Value), what a ParamShard of it carries.
struct ParamRule {
  bool decay = false;
  double sign_rate = 0;
  bool operator==(const ParamRule&) const = default;
};
std::map<std::string, ParamRule> param_rules(const Graph& graph);

class Optimizer {
 public:
  Optimizer(OptimizerConfig config, std::vector<ParamShard> shards);

  // One optimizer step: begin_step(), then update() every shard once.
  void begin_step() { ++steps_; }
  // Shard `index`'s elements: `param` and `grad` point at its first element.
  // `decay_scale` scales the weight decay (a parameter server applying one
  // worker's share of the batch).
  void update(size_t index, float* param, const float* grad, double lr, double decay_scale = 1.0);

  const std::vector<ParamShard>& shards() const { return shards_; }
  const OptimizerConfig& config() const { return config_; }
  int64_t steps() const { return steps_; }
  int64_t state_bytes() const;  // every slot of every shard
  size_t slot_count() const { return slots_.size(); }
  // Slot `slot`'s values of shard `index` (count elements).
  std::span<const float> state(size_t slot, size_t index) const;
  // Slot `slot` over every shard, in shard order (sum of counts elements):
  // for an optimizer over whole parameters, the flat parameter layout.
  std::span<float> flat_state(size_t slot);
  // Takes each shard's state from `saved(shard, slot)`: shard.count float32
  // elements (read from a checkpoint of any sharding); px::Error names a
  // mis-sized one.
  using SavedState = std::function<Tensor(const ParamShard& shard, const std::string& slot)>;
  void load(const SavedState& saved, int64_t steps);

 private:
  OptimizerConfig config_;
  std::vector<ParamShard> shards_;
  std::vector<int64_t> at_;    // per shard: offset in the flat slots
  std::vector<Tensor> slots_;  // per slot: (sum of shard counts)
  int64_t steps_ = 0;
};

}  // namespace px
