// Optimizers over a ParamStore: SGD with momentum and AdamW, with torch's
// exact update rules (kernels/optimizer.h). State tensors are named
// "<param>.momentum" / "<param>.exp_avg" / "<param>.exp_avg_sq" for checkpoints.
#pragma once

#include <map>
#include <string>

#include "runtime/param_store.h"

namespace px {

struct OptimizerConfig {
  std::string kind = "adamw";  // "sgd" or "adamw"
  double momentum = 0.9;       // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
  double weight_decay = 0.0;   // applied to params marked for decay
  bool operator==(const OptimizerConfig&) const = default;
};

void validate(const OptimizerConfig& config);
// Names of an optimizer's per-parameter state tensors: sgd {"momentum"},
// adamw {"exp_avg", "exp_avg_sq"}; saved as "<param>.<slot>".
std::vector<std::string> optimizer_slot_names(const std::string& kind);

class Optimizer {
 public:
  Optimizer(OptimizerConfig config, const ParamStore& params, std::map<std::string, bool> decays);
  // One update with learning rate lr; grads by parameter name.
  void step(ParamStore& params, const std::map<std::string, Tensor>& grads, double lr);
  // The same step one parameter at a time (P3 updates each layer as soon as
  // its gradient has arrived): begin_step(), then update() every parameter.
  void begin_step() { ++steps_; }
  void update(ParamStore& params, const std::string& name, const Tensor& grad, double lr);
  int64_t steps() const { return steps_; }
  NamedTensors state() const;
  int64_t state_bytes() const;  // every slot of every parameter
  void load_state(const SafetensorsFile& file, int64_t steps);

 private:
  OptimizerConfig config_;
  std::map<std::string, bool> decays_;
  std::vector<std::string> names_;
  std::map<std::string, std::vector<Tensor>> slots_;  // momentum | exp_avg, exp_avg_sq
  int64_t steps_ = 0;
};

}  // namespace px
