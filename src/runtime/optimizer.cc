#include "runtime/optimizer.h"

#include "kernels/optimizer.h"

namespace px {

void validate(const OptimizerConfig& c) {
  if (c.kind != "sgd" && c.kind != "adamw") fail("optimizer '{}' is unknown: expected sgd or adamw", c.kind);
  if (c.momentum < 0 || c.momentum >= 1) fail("momentum {} must be in [0, 1)", c.momentum);
  if (c.beta1 < 0 || c.beta1 >= 1 || c.beta2 < 0 || c.beta2 >= 1)
    fail("adamw betas ({}, {}) must be in [0, 1)", c.beta1, c.beta2);
  if (c.weight_decay < 0) fail("weight decay {} must be >= 0", c.weight_decay);
}

std::vector<std::string> optimizer_slot_names(const std::string& kind) {
  if (kind == "sgd") return {"momentum"};
  return {"exp_avg", "exp_avg_sq"};
}

Optimizer::Optimizer(OptimizerConfig config, const ParamStore& params, std::map<std::string, bool> decays)
    : config_(std::move(config)), decays_(std::move(decays)), names_(params.names()) {
  validate(config_);
  for (const auto& name : names_) {
    auto& slots = slots_[name];
    for (size_t i = 0; i < optimizer_slot_names(config_.kind).size(); ++i)
      slots.push_back(Tensor::zeros(params.at(name).shape()));
  }
}

void Optimizer::step(ParamStore& params, const std::map<std::string, Tensor>& grads, double lr) {
  begin_step();
  for (const auto& name : names_) {
    auto it = grads.find(name);
    PX_CHECK(it != grads.end(), "no gradient for {}", name);
    update(params, name, it->second, lr);
  }
}

void Optimizer::update(ParamStore& params, const std::string& name, const Tensor& grad, double lr) {
  Tensor& p = params.at(name);
  auto& slots = slots_.at(name);
  float wd = decays_[name] ? static_cast<float>(config_.weight_decay) : 0.0f;
  if (config_.kind == "sgd")
    kernels::sgd_momentum(p.numel(), static_cast<float>(lr), static_cast<float>(config_.momentum), wd, steps_ == 1,
                          p.f32(), grad.f32(), slots[0].f32());
  else
    kernels::adamw(p.numel(), static_cast<float>(lr), static_cast<float>(config_.beta1),
                   static_cast<float>(config_.beta2), static_cast<float>(config_.eps), wd, steps_, p.f32(), grad.f32(),
                   slots[0].f32(), slots[1].f32());
}

NamedTensors Optimizer::state() const {
  NamedTensors out;
  auto slot = optimizer_slot_names(config_.kind);
  for (const auto& name : names_)
    for (size_t i = 0; i < slot.size(); ++i) out.emplace_back(name + "." + slot[i], slots_.at(name)[i]);
  return out;
}

void Optimizer::load_state(const SafetensorsFile& file, int64_t steps) {
  auto slot = optimizer_slot_names(config_.kind);
  for (const auto& name : names_)
    for (size_t i = 0; i < slot.size(); ++i) {
      std::string key = name + "." + slot[i];
      if (!file.contains(key))
        fail("optimizer state '{}' has no tensor '{}' (was it saved by the {} optimizer?)", file.path, key,
             config_.kind);
      Tensor& dst = slots_[name][i];
      if (file.at(key).shape() != dst.shape())
        fail("optimizer tensor '{}' has shape {} in '{}', expected {}", key, file.at(key).shape(), file.path,
             dst.shape());
      dst.copy_from(file.at(key));
    }
  steps_ = steps;
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& [name, slots] : slots_)
    for (const Tensor& t : slots) n += t.numel() * static_cast<int64_t>(sizeof(float));
  return n;
}

}  // namespace px
