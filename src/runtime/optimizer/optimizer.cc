#include "runtime/optimizer/optimizer.h"

#include <cstring>

#include "kernels/optimizer.h"

namespace px {

void validate(const OptimizerConfig& c) {
  if (c.kind != "sgd" && c.kind != "adamw") fail("optimizer '{}' is unknown: expected sgd or adamw", c.kind);
  if (c.momentum < 0 || c.momentum >= 1) fail("momentum {} must be in [0, 1)", c.momentum);
  if (c.beta1 < 0 || c.beta1 >= 1 || c.beta2 < 0 || c.beta2 >= 1)
    fail("adamw betas ({}, {}) must be in [0, 1)", c.beta1, c.beta2);
  if (c.weight_decay < 0) fail("weight decay {} must be >= 0", c.weight_decay);
}

void validate(const OptimizerOptions& o) {
  validate(o.update);
  validate(o.schedule);
  if (o.grad_clip < 0) fail("gradient clip {} must be >= 0", o.grad_clip);
}

plan::RunUse run_use(const OptimizerOptions& o) {
  return {.grad_clip = o.grad_clip, .sgd_momentum = o.update.kind == "sgd" ? o.update.momentum : 0};
}

std::vector<std::string> optimizer_slot_names(const std::string& kind) {
  if (kind == "sgd") return {"momentum"};
  return {"exp_avg", "exp_avg_sq"};
}

Optimizer::Optimizer(OptimizerConfig config, std::vector<ParamShard> shards)
    : config_(std::move(config)), shards_(std::move(shards)) {
  validate(config_);
  int64_t total = 0;
  for (const ParamShard& s : shards_) {
    PX_CHECK(s.offset >= 0 && s.count >= 0 && s.offset + s.count <= s.shape.numel(), "shard of {}: [{}, {}) of {}",
             s.name, s.offset, s.offset + s.count, s.shape.numel());
    at_.push_back(total);
    total += s.count;
  }
  for (size_t i = 0; i < optimizer_slot_names(config_.kind).size(); ++i)
    slots_.push_back(Tensor::zeros({total}, DType::f32));
}

std::map<std::string, ParamRule> param_rules(const Graph& graph) {
  std::map<std::string, ParamRule> rules;
  for (ValueId p : graph.params()) rules[graph.value(p).name] = {graph.value(p).weight_decay, graph.value(p).sign_rate};
  return rules;
}

void Optimizer::update(size_t index, float* param, const float* grad, double lr, double decay_scale) {
  const ParamShard& s = shards_.at(index);
  const size_t at = static_cast<size_t>(at_[index]);
  if (s.sign_rate > 0) {
    const auto rate = static_cast<float>(s.sign_rate);
    for (int64_t i = 0; i < s.count; ++i) param[i] -= rate * static_cast<float>((grad[i] > 0) - (grad[i] < 0));
    return;
  }
  const float wd = s.decay ? static_cast<float>(config_.weight_decay * decay_scale) : 0.0f;
  if (config_.kind == "sgd")
    kernels::sgd_momentum(s.count, static_cast<float>(lr), static_cast<float>(config_.momentum), wd, steps_ == 1,
                          param, grad, slots_[0].f32() + at);
  else
    kernels::adamw(s.count, static_cast<float>(lr), static_cast<float>(config_.beta1),
                   static_cast<float>(config_.beta2), static_cast<float>(config_.eps), wd, steps_, param, grad,
                   slots_[0].f32() + at, slots_[1].f32() + at);
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (const Tensor& t : slots_) n += static_cast<int64_t>(t.nbytes());
  return n;
}

std::span<const float> Optimizer::state(size_t slot, size_t index) const {
  return {slots_.at(slot).f32() + at_.at(index), static_cast<size_t>(shards_.at(index).count)};
}

void Optimizer::load(const SavedState& saved, int64_t steps) {
  const std::vector<std::string> names = optimizer_slot_names(config_.kind);
  for (size_t k = 0; k < names.size(); ++k)
    for (size_t i = 0; i < shards_.size(); ++i) {
      const ParamShard& s = shards_[i];
      const Tensor values = saved(s, names[k]);
      if (values.numel() != s.count || values.dtype() != DType::f32)
        fail("optimizer state '{}.{}' for elements [{}, {}) has {} {} elements, expected {} float32", s.name,
             names[k], s.offset, s.offset + s.count, values.numel(), dtype_name(values.dtype()), s.count);
      std::memcpy(slots_[k].f32() + at_[i], values.f32(), static_cast<size_t>(s.count) * sizeof(float));
    }
  steps_ = steps;
}

std::span<float> Optimizer::flat_state(size_t slot) {
  Tensor& values = slots_.at(slot);
  return {values.f32(), static_cast<size_t>(values.numel())};
}

}  // namespace px
