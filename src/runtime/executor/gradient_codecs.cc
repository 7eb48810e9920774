#include "runtime/executor/gradient_codecs.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "comm/collectives.h"
#include "core/error.h"

namespace px {

using parallel::Buffer;

std::vector<int> gradient_collectives(const parallel::Program& program) {
  std::vector<int> ids;
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const auto* c = std::get_if<parallel::Collective>(&program.instrs[i].op);
    if (c != nullptr && program.buffers[static_cast<size_t>(c->input.buffer)].kind == Buffer::Kind::grad_bucket)
      ids.push_back(static_cast<int>(i));
  }
  return ids;
}

GradientCodecs::GradientCodecs(const parallel::Program& program, int data_path_ranks) {
  // Every gradient collective through its own compressor (vectors with
  // Method::none: dense, but counted alike).
  const std::vector<int> gradients = gradient_collectives(program);
  auto collective = [&](int id) -> const parallel::Collective& {
    return std::get<parallel::Collective>(program.instrs[static_cast<size_t>(id)].op);
  };
  const bool lossy = std::any_of(gradients.begin(), gradients.end(), [&](int id) { return collective(id).codec.lossy(); });
  if (lossy && data_path_ranks > 1)
    for (int id : gradients) {
      const parallel::Collective& op = collective(id);
      const Buffer& buffer = program.buffers[static_cast<size_t>(op.input.buffer)];
      PX_CHECK_EQ(buffer.members.size(), 1u);
      auto codec = std::unique_ptr<Codec>(new Codec{
          .param = buffer.members.front().name,
          .compressor = comm::compression::GradientCompressor(op.codec, op.input.count, op.codec_rows, op.codec_cols,
                                                               0x9e3779b9u)});
      if (op.momentum > 0) codec->velocity.assign(static_cast<size_t>(op.input.count), 0.0f);
      codecs_.push_back(std::move(codec));
    }
  bind(program);
}

void GradientCodecs::bind(const parallel::Program& program) {
  codec_of_.assign(program.instrs.size(), -1);
  if (codecs_.empty()) return;
  const std::vector<int> gradients = gradient_collectives(program);
  if (gradients.size() != codecs_.size())
    fail("executor: the program for a batch of {} rows has {} gradient collectives, the run's codecs {}",
         program.global_rows, gradients.size(), codecs_.size());
  for (size_t k = 0; k < gradients.size(); ++k) codec_of_[static_cast<size_t>(gradients[k])] = static_cast<int>(k);
}

void GradientCodecs::begin_step() {
  for (auto& codec : codecs_) codec->wire = {};
}

uint64_t GradientCodecs::bytes_sent() const {
  uint64_t bytes = 0;
  for (const auto& codec : codecs_) bytes += codec->wire.bytes_sent;
  return bytes;
}

std::function<void(comm::Communicator&)> GradientCodecs::exchange(int id, std::span<float> input, const float* agreed,
                                                                  uint64_t step, double momentum) {
  const int k = codec_of_.empty() ? -1 : codec_of_[static_cast<size_t>(id)];
  if (k < 0) return nullptr;
  PX_CHECK(agreed != nullptr, "compressed collective #{} without the ranks' agreement", id);
  Codec* codec = codecs_[static_cast<size_t>(k)].get();
  return [codec, input, agreed, step, momentum](comm::Communicator& comm) {
    codec->state_before = codec->compressor.state();
    codec->velocity_before = codec->velocity;
    if (*agreed > 0) {
      std::fill(input.begin(), input.end(), std::numeric_limits<float>::quiet_NaN());
      return;
    }
    if (codec->velocity.empty()) {
      codec->wire = codec->compressor.allreduce_sum(comm, input, step);
      return;
    }
    // Momentum correction: send the velocity; an entry was sent exactly
    // when the residual after the call differs from (velocity + residual
    // before), which unsent entries keep bitwise; their momentum is then
    // cleared.
    std::vector<float>& u = codec->velocity;
    const float m = static_cast<float>(momentum);
    std::span<const float> residual = codec->compressor.residual();
    std::vector<float> kept(input.size());
    for (size_t i = 0; i < input.size(); ++i) {
      u[i] = m * u[i] + input[i];
      input[i] = u[i];
      kept[i] = residual.empty() ? u[i] : u[i] + residual[i];
    }
    codec->wire = codec->compressor.allreduce_sum(comm, input, step);
    residual = codec->compressor.residual();
    if (residual.size() == u.size())
      for (size_t i = 0; i < u.size(); ++i)
        if (residual[i] != kept[i]) u[i] = 0.0f;
  };
}

void GradientCodecs::rollback() {
  for (auto& codec : codecs_) {
    if (!codec->state_before.empty()) codec->compressor.load_state(codec->state_before);
    codec->velocity = codec->velocity_before;
  }
}

NamedTensors GradientCodecs::gather_state(comm::Communicator& data_path) const {
  if (!compressing()) return {};
  // Every rank holds the same entries (same program and spec): one flat
  // allgather of equal-sized blocks.
  std::vector<std::pair<std::string, std::vector<float>>> state;
  for (const auto& codec : codecs_) {
    for (auto& [entry, values] : codec->compressor.state()) state.emplace_back(codec->param + "." + entry, std::move(values));
    if (!codec->velocity.empty()) state.emplace_back(codec->param + ".velocity", codec->velocity);
  }
  std::vector<float> mine;
  for (const auto& [name, values] : state) mine.insert(mine.end(), values.begin(), values.end());
  const int p = data_path.size();
  std::vector<float> all(mine.size() * static_cast<size_t>(p));
  comm::allgather(data_path, mine.data(), comm::Buffer(std::span<float>(all)));
  NamedTensors out;
  for (int r = 0; r < p; ++r) {
    const float* at = all.data() + mine.size() * static_cast<size_t>(r);
    for (const auto& [name, values] : state) {
      Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::f32);
      std::memcpy(t.f32(), at, values.size() * sizeof(float));
      at += values.size();
      out.emplace_back(fmt::format("rank{}.{}", r, name), std::move(t));
    }
  }
  return out;
}

void GradientCodecs::load_state(const SafetensorsFile& file, int rank) {
  auto take = [&](const std::string& name, std::vector<float>& into) {
    const std::string key = fmt::format("rank{}.{}", rank, name);
    if (!file.contains(key))
      fail("compression state '{}' has no tensor '{}' (saved with another compression or rank count?)", file.path,
           key);
    const Tensor& saved = file.at(key);
    if (saved.numel() != static_cast<int64_t>(into.size()))
      fail("compression state '{}': '{}' has {} elements, this run needs {}", file.path, key, saved.numel(),
           into.size());
    std::memcpy(into.data(), saved.f32(), into.size() * sizeof(float));
  };
  for (auto& codec : codecs_) {
    auto state = codec->compressor.state();
    for (auto& [entry, values] : state) take(codec->param + "." + entry, values);
    codec->compressor.load_state(state);
    if (!codec->velocity.empty()) take(codec->param + ".velocity", codec->velocity);
  }
}

}  // namespace px
