#include "runtime/parameter_server/shard_optimizer.h"

#include <algorithm>
#include <cstring>

#include "kernels/optimizer.h"

namespace px::ps {

std::vector<int64_t> flat_offsets(const ParamStore& store) {
  std::vector<int64_t> offsets;
  int64_t at = 0;
  for (const auto& name : store.names()) {
    offsets.push_back(at);
    at += store.at(name).numel();
  }
  return offsets;
}

int slots_per_param(const OptimizerConfig& config) { return config.kind == "sgd" ? 1 : 2; }

ShardOptimizer::ShardOptimizer(OptimizerConfig config, const ParamStore& store, const Optimizer& full,
                               const std::map<std::string, bool>& decays, comm::Block slice)
    : config_(std::move(config)), slice_(slice) {
  const int slot_count = slots_per_param(config_);
  params_.resize(static_cast<size_t>(slice.count));
  slots_.assign(static_cast<size_t>(slot_count), std::vector<float>(static_cast<size_t>(slice.count)));
  NamedTensors state = full.state();  // (param, slot) in ParamStore order
  PX_CHECK_EQ(state.size(), store.names().size() * static_cast<size_t>(slot_count));
  std::vector<int64_t> offsets = flat_offsets(store);
  for (size_t t = 0; t < offsets.size(); ++t) {
    const std::string& name = store.names()[t];
    const Tensor& value = store.at(name);
    const int64_t begin = std::max(offsets[t], slice.begin);
    const int64_t end = std::min(offsets[t] + value.numel(), slice.begin + slice.count);
    if (begin >= end) continue;
    auto it = decays.find(name);
    pieces_.push_back({begin - slice.begin, end - begin, it != decays.end() && it->second});
    const size_t bytes = static_cast<size_t>(end - begin) * sizeof(float);
    std::memcpy(params_.data() + (begin - slice.begin), value.f32() + (begin - offsets[t]), bytes);
    for (int s = 0; s < slot_count; ++s)
      std::memcpy(slots_[static_cast<size_t>(s)].data() + (begin - slice.begin),
                  state[t * static_cast<size_t>(slot_count) + static_cast<size_t>(s)].second.f32() +
                      (begin - offsets[t]),
                  bytes);
  }
  updates_ = full.steps();
}

void ShardOptimizer::step(std::span<const float> gradient, double lr, double decay_scale) {
  PX_CHECK_EQ(static_cast<int64_t>(gradient.size()), slice_.count);
  ++updates_;
  const float rate = static_cast<float>(lr);
  for (const Piece& piece : pieces_) {
    const float wd = piece.decay ? static_cast<float>(config_.weight_decay * decay_scale) : 0.0f;
    float* p = params_.data() + piece.begin;
    const float* g = gradient.data() + piece.begin;
    if (config_.kind == "sgd")
      kernels::sgd_momentum(piece.count, rate, static_cast<float>(config_.momentum), wd, updates_ == 1, p, g,
                            slots_[0].data() + piece.begin);
    else
      kernels::adamw(piece.count, rate, static_cast<float>(config_.beta1), static_cast<float>(config_.beta2),
                     static_cast<float>(config_.eps), wd, updates_, p, g, slots_[0].data() + piece.begin,
                     slots_[1].data() + piece.begin);
  }
}

}  // namespace px::ps
