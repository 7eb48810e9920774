#include "runtime/parameter_server/server_slice.h"

#include <algorithm>
#include <cstring>

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

namespace {

// The parameter shards inside `slice`, in flat order, and where each begins in it.
std::vector<ParamShard> shards_in(const ParamStore& store, const std::map<std::string, ParamRule>& rules,
                                  comm::Block slice, std::vector<int64_t>& begin) {
  std::vector<ParamShard> shards;
  const std::vector<int64_t> offsets = flat_offsets(store);
  for (size_t t = 0; t < offsets.size(); ++t) {
    const std::string& name = store.names()[t];
    const Tensor& value = store.at(name);
    const int64_t lo = std::max(offsets[t], slice.begin);
    const int64_t hi = std::min(offsets[t] + value.numel(), slice.begin + slice.count);
    if (lo >= hi) continue;
    const auto it = rules.find(name);
    const ParamRule rule = it != rules.end() ? it->second : ParamRule{};
    shards.push_back({name, value.shape(), lo - offsets[t], hi - lo, rule.decay, rule.sign_rate});
    begin.push_back(lo - slice.begin);
  }
  return shards;
}

}  // namespace

ServerSlice::ServerSlice(OptimizerConfig config, const ParamStore& store, const std::map<std::string, ParamRule>& rules,
                         comm::Block slice, const ShardedTensors* state, int64_t steps)
    : slice_(slice), optimizer_(std::move(config), shards_in(store, rules, slice, begin_)) {
  params_.resize(static_cast<size_t>(slice.count));
  for (size_t k = 0; k < optimizer_.shards().size(); ++k) {
    const ParamShard& s = optimizer_.shards()[k];
    std::memcpy(params_.data() + begin_[k], store.at(s.name).f32() + s.offset, static_cast<size_t>(s.count) * sizeof(float));
  }
  if (state == nullptr) return;
  optimizer_.load(
      [&](const ParamShard& s, const std::string& slot) {
        return state->read(s.name + "." + slot, parallel::ShardRun::of(s.shape, s.shape,
                                                                       parallel::ShardRun::whole(s.shape).pieces,
                                                                       s.offset, s.offset + s.count));
      },
      steps);
}

void ServerSlice::step(std::span<const float> gradient, double lr, double decay_scale) {
  PX_CHECK_EQ(static_cast<int64_t>(gradient.size()), slice_.count);
  optimizer_.begin_step();
  for (size_t k = 0; k < optimizer_.shards().size(); ++k)
    optimizer_.update(k, params_.data() + begin_[k], gradient.data() + begin_[k], lr, decay_scale);
}

std::vector<float> ServerSlice::slot(size_t k) const {
  std::vector<float> values(static_cast<size_t>(slice_.count));
  for (size_t i = 0; i < optimizer_.shards().size(); ++i) {
    std::span<const float> state = optimizer_.state(k, i);
    std::copy(state.begin(), state.end(), values.begin() + begin_[i]);
  }
  return values;
}

}  // namespace px::ps
