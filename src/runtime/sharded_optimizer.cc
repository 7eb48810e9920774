#include "runtime/sharded_optimizer.h"

#include <cstring>

#include "kernels/optimizer.h"

namespace px {

ShardedOptimizer::ShardedOptimizer(OptimizerConfig config, std::vector<ShardPiece> pieces, int64_t shard_count)
    : config_(std::move(config)), pieces_(std::move(pieces)) {
  validate(config_);
  for (size_t i = 0; i < optimizer_slot_names(config_.kind).size(); ++i)
    slots_.push_back(Tensor::zeros({shard_count}, DType::f32));
}

void ShardedOptimizer::step(ParamStore& params, std::span<const float> grad_shard, double lr) {
  ++steps_;
  for (const ShardPiece& piece : pieces_) {
    float* p = params.at(piece.name).f32() + piece.param_offset;
    const float* g = grad_shard.data() + piece.shard_offset;
    const float wd = piece.decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    const size_t at = static_cast<size_t>(piece.shard_offset);
    if (config_.kind == "sgd")
      kernels::sgd_momentum(piece.count, static_cast<float>(lr), static_cast<float>(config_.momentum), wd,
                            steps_ == 1, p, g, slots_[0].f32() + at);
    else
      kernels::adamw(piece.count, static_cast<float>(lr), static_cast<float>(config_.beta1),
                     static_cast<float>(config_.beta2), static_cast<float>(config_.eps), wd, steps_, p, g,
                     slots_[0].f32() + at, slots_[1].f32() + at);
  }
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t n = 0;
  for (const Tensor& s : slots_) n += s.numel() * static_cast<int64_t>(sizeof(float));
  return n;
}

void ShardedOptimizer::load(const SafetensorsFile& file, int64_t steps) {
  const std::vector<std::string> names = optimizer_slot_names(config_.kind);
  for (size_t i = 0; i < names.size(); ++i)
    for (const ShardPiece& piece : pieces_) {
      const std::string key = piece.name + "." + names[i];
      if (!file.contains(key))
        fail("optimizer state '{}' has no tensor '{}' (was it saved by the {} optimizer?)", file.path, key,
             config_.kind);
      const Tensor& saved = file.at(key);
      if (saved.numel() < piece.param_offset + piece.count)
        fail("optimizer tensor '{}' in '{}' has {} elements, the model needs {}", key, file.path, saved.numel(),
             piece.param_offset + piece.count);
      std::memcpy(slots_[i].f32() + piece.shard_offset, saved.f32() + piece.param_offset,
                  static_cast<size_t>(piece.count) * sizeof(float));
    }
  steps_ = steps;
}

}  // namespace px
