// What outlives a step: the parameters (whole, or this rank's ZeRO-3
// shard), the optimizer state over the program's shards, the compression
// state, and the memory they take.
#include <cstring>
#include <map>

#include "comm/collectives.h"
#include "parallel/shard.h"
#include "runtime/executor/program_executor.h"

namespace px {

using parallel::Buffer;

namespace {

// The part of parameter `param` inside this rank's block of its bucket, in
// parameter elements [begin, end), or begin == end.
struct Piece {
  int64_t begin = 0, end = 0;
  int64_t shard_offset = 0;  // of `begin` in the shard buffers
};

Piece piece_of(const parallel::Program& p, const parallel::ParamLayout& param) {
  const parallel::BucketLayout& b = p.buckets[static_cast<size_t>(param.bucket)];
  const int64_t in_bucket = param.offset - b.offset;
  const int64_t lo = std::max(in_bucket, b.block_begin);
  const int64_t hi = std::min(in_bucket + param.shape.numel(), b.block_begin + b.block_count);
  if (lo >= hi) return {};
  return {lo - in_bucket, hi - in_bucket, b.shard_offset + (lo - b.block_begin)};
}

// The program's parameter layouts by parameter name.
std::map<std::string, const parallel::ParamLayout*> layouts_by_name(const parallel::Program& program) {
  std::map<std::string, const parallel::ParamLayout*> by_name;
  for (const parallel::ParamLayout& p : program.params) by_name[p.name] = &p;
  return by_name;
}

// A 1-D tensor holding a copy of `count` floats at `values`.
Tensor copy_of(const float* values, int64_t count) {
  Tensor t = Tensor::empty(Shape{count}, DType::f32);
  std::memcpy(t.f32(), values, static_cast<size_t>(count) * sizeof(float));
  return t;
}

// Whether the model axes (every axis but the data axis) split the parameter.
bool model_split(const parallel::ParamLayout& param) { return param.shape != param.global_shape; }

}  // namespace

Tensor ProgramExecutor::local_of(const Tensor& whole, const parallel::ParamLayout& param) const {
  if (whole.shape() != param.global_shape)
    fail("parameter '{}' has shape {}, the model expects {}", param.name, whole.shape(), param.global_shape);
  if (!model_split(param)) return whole;
  Tensor local = Tensor::empty(param.shape, DType::f32);
  const int data_axis = program_.strategy.mesh.axis(program_.strategy.data_axis);
  parallel::copy_to_local(whole, parallel::shard_pieces(param.global_shape, param.placement, program_.strategy.mesh,
                                                        program_.coords, data_axis),
                          local);
  return local;
}

Tensor ProgramExecutor::whole_of(const Tensor& local, const parallel::ParamLayout& param) {
  if (!model_split(param)) return local;
  // Undo the splits one axis at a time, the inner axes first.
  Tensor t = local;
  parallel::AxisPlacements placement = param.placement;
  for (size_t a = placement.size(); a-- > 0;) {
    if (!placement[a].is_split() || groups_[a] == nullptr) continue;
    const parallel::AxisPlacements was = placement;
    placement[a] = Placement::B();
    const Shape whole = parallel::local_shape(param.global_shape, placement, program_.strategy.mesh, program_.coords);
    t = reshard_tensor(*groups_[a], t, was[a], Placement::B(), whole, program_.collective);
  }
  return t;
}

void ProgramExecutor::set_parameters(const ParamStore& store) {
  for (const parallel::ParamLayout& param : program_.params) {
    const Tensor value = local_of(store.at(param.name), param);
    if (program_.params_buffer >= 0) {
      std::memcpy(buffers_.storage(program_.params_buffer).f32() + param.offset, value.f32(),
                  static_cast<size_t>(value.numel()) * sizeof(float));
      continue;
    }
    const Piece piece = piece_of(program_, param);
    std::memcpy(buffers_.storage(program_.param_shard_buffer).f32() + piece.shard_offset,
                value.f32() + piece.begin, static_cast<size_t>(piece.end - piece.begin) * sizeof(float));
  }
}

void ProgramExecutor::gather_buckets(std::vector<float>& flat) {
  std::vector<float> mine;
  for (const parallel::BucketLayout& b : program_.buckets) {
    mine.assign(flat.begin() + b.offset + b.block_begin, flat.begin() + b.offset + b.block_begin + b.block_count);
    comm::allgather(*group_, mine.data(),
                    comm::Buffer(std::span<float>(flat.data() + b.offset, static_cast<size_t>(b.count))),
                    program_.collective);
  }
}

ParamStore ProgramExecutor::parameters() {
  NamedTensors named;
  const auto by_name = layouts_by_name(program_);
  if (program_.params_buffer >= 0) {
    const Tensor& flat = buffers_.storage(program_.params_buffer);
    for (const std::string& name : declared_) {
      if (!by_name.count(name)) continue;  // another pipeline stage's
      const parallel::ParamLayout& p = *by_name.at(name);
      named.emplace_back(name, whole_of(flat.slice_rows(p.offset, p.offset + p.shape.numel()).reshape(p.shape), p));
    }
    if (program_.pipeline.axis >= 0) named = gather_stages(std::move(named));
    return ParamStore::of(std::move(named));
  }
  // ZeRO-3: every rank's blocks, bucket by bucket.
  std::vector<float> flat(static_cast<size_t>(program_.param_count));
  const float* shard = buffers_.storage(program_.param_shard_buffer).f32();
  for (const parallel::BucketLayout& b : program_.buckets)
    std::memcpy(flat.data() + b.offset + b.block_begin, shard + b.shard_offset,
                static_cast<size_t>(b.block_count) * sizeof(float));
  gather_buckets(flat);
  for (const std::string& name : declared_) {
    const parallel::ParamLayout& p = *by_name.at(name);
    Tensor t = Tensor::empty(p.shape, DType::f32);
    std::memcpy(t.f32(), flat.data() + p.offset, static_cast<size_t>(p.shape.numel()) * sizeof(float));
    named.emplace_back(name, whole_of(t, p));
  }
  return ParamStore::of(std::move(named));
}

Tensor ProgramExecutor::gradient(const std::string& name) const {
  for (const parallel::ParamLayout& p : program_.params) {
    if (p.name != name) continue;
    const parallel::BucketLayout& b = program_.buckets.at(static_cast<size_t>(p.bucket));
    return buffers_.view({b.grad_buffer, p.offset - b.offset, p.shape.numel()}).reshape(p.shape);
  }
  fail("the program has no gradient of parameter '{}'", name);
}

parallel::ShardRun ProgramExecutor::run_of(const parallel::ParamLayout& param, int64_t begin, int64_t end) const {
  const int data_axis = program_.strategy.mesh.axis(program_.strategy.data_axis);
  return parallel::ShardRun::of(
      param.global_shape, param.shape,
      parallel::shard_pieces(param.global_shape, param.placement, program_.strategy.mesh, program_.coords, data_axis),
      begin, end);
}

bool ProgramExecutor::writes_copy(const parallel::ParamLayout& param, bool split_over_data, bool every_copy) const {
  const int data_axis = program_.strategy.mesh.axis(program_.strategy.data_axis);
  for (size_t a = 0; a < program_.coords.size(); ++a) {
    if (static_cast<int>(a) == program_.pipeline.axis) {
      // Stages hold different parameters; one sharing a parameter with another is not its owner.
      for (const parallel::PipelineLayout::Param& p : program_.pipeline.params)
        if (p.name == param.name && p.owner != program_.coords[a]) return false;
      continue;
    }
    const bool split = static_cast<int>(a) == data_axis ? split_over_data : param.placement[a].is_split();
    if (!split && !every_copy && program_.coords[a] != 0) return false;
  }
  return true;
}

std::vector<SavedRun> ProgramExecutor::state_runs(bool every_copy) const {
  PX_CHECK(optimizer_.has_value(), "the program has no optimizer");
  const auto by_name = layouts_by_name(program_);
  std::vector<SavedRun> runs;
  // Parameters: the whole model shard, or (ZeRO-3) this rank's block of it.
  const bool params_split = program_.params_buffer < 0;
  for (const std::string& name : declared_) {
    if (!by_name.count(name)) continue;  // another pipeline stage's
    const parallel::ParamLayout& p = *by_name.at(name);
    if (!writes_copy(p, params_split, every_copy)) continue;
    if (!params_split) {
      const float* values = buffers_.storage(program_.params_buffer).f32() + p.offset;
      runs.push_back({name, run_of(p, 0, p.shape.numel()), copy_of(values, p.shape.numel())});
      continue;
    }
    const Piece piece = piece_of(program_, p);
    if (piece.begin == piece.end) continue;
    const float* values = buffers_.storage(program_.param_shard_buffer).f32() + piece.shard_offset;
    runs.push_back({name, run_of(p, piece.begin, piece.end), copy_of(values, piece.end - piece.begin)});
  }
  // Optimizer state: one run per shard and slot (a whole model shard, or
  // under ZeRO the run of this rank's block).
  const bool state_split = program_.grad_shard_buffer >= 0;
  const std::vector<std::string> slot_names = optimizer_slot_names(optimizer_->config().kind);
  for (size_t slot = 0; slot < optimizer_->slot_count(); ++slot)
    for (size_t k = 0; k < optimizer_->shards().size(); ++k) {
      const ParamShard& s = optimizer_->shards()[k];
      const parallel::ParamLayout& p = *by_name.at(s.name);
      if (s.count == 0 || !writes_copy(p, state_split, every_copy)) continue;
      const std::span<const float> state = optimizer_->state(slot, k);
      runs.push_back({s.name + "." + slot_names[slot], run_of(p, s.offset, s.offset + s.count),
                      copy_of(state.data(), s.count)});
    }
  return runs;
}

void ProgramExecutor::load_state(const ShardedTensors& saved, int64_t optimizer_steps) {
  PX_CHECK(optimizer_.has_value(), "the program has no optimizer");
  for (const parallel::ParamLayout& p : program_.params) {
    if (program_.params_buffer >= 0) {
      const Tensor values = saved.read(p.name, run_of(p, 0, p.shape.numel()));
      std::memcpy(buffers_.storage(program_.params_buffer).f32() + p.offset, values.f32(),
                  values.nbytes());
      continue;
    }
    const Piece piece = piece_of(program_, p);
    if (piece.begin == piece.end) continue;
    const Tensor values = saved.read(p.name, run_of(p, piece.begin, piece.end));
    std::memcpy(buffers_.storage(program_.param_shard_buffer).f32() + piece.shard_offset, values.f32(),
                values.nbytes());
  }
  const auto by_name = layouts_by_name(program_);
  optimizer_->load(
      [&](const ParamShard& s, const std::string& slot) {
        const std::string key = s.name + "." + slot;
        if (!saved.contains(key))
          fail("checkpoint '{}' has no optimizer state '{}' (was it saved by another optimizer than {}?)",
               saved.where(), key, optimizer_->config().kind);
        return saved.read(key, run_of(*by_name.at(s.name), s.offset, s.offset + s.count));
      },
      optimizer_steps);
}

NamedTensors ProgramExecutor::gather_compression_state() {
  if (!compressing()) return {};
  // Every rank holds the same entries (same program and spec): one flat
  // allgather of equal-sized blocks.
  std::vector<std::pair<std::string, std::vector<float>>> state;
  for (const Codec* codec : compressors_) {
    for (auto& [entry, values] : codec->compressor.state()) state.emplace_back(codec->param + "." + entry, std::move(values));
    if (!codec->velocity.empty()) state.emplace_back(codec->param + ".velocity", codec->velocity);
  }
  std::vector<float> mine;
  for (const auto& [name, values] : state) mine.insert(mine.end(), values.begin(), values.end());
  const int p = group_->size();
  std::vector<float> all(mine.size() * static_cast<size_t>(p));
  comm::allgather(*group_, mine.data(), comm::Buffer(std::span<float>(all)));
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

void ProgramExecutor::load_compression_state(const SafetensorsFile& file) {
  const int rank = group_ ? group_->rank() : 0;
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
  for (Codec* codec : compressors_) {
    auto state = codec->compressor.state();
    for (auto& [entry, values] : state) take(codec->param + "." + entry, values);
    codec->compressor.load_state(state);
    if (!codec->velocity.empty()) take(codec->param + ".velocity", codec->velocity);
  }
}

ExecutorMemory ProgramExecutor::memory() const {
  auto bytes = [&](int buffer) {
    return buffer < 0 ? int64_t{0} : program_.buffers[static_cast<size_t>(buffer)].bytes();
  };
  ExecutorMemory m;
  m.parameters = bytes(program_.params_buffer) + bytes(program_.param_shard_buffer);
  m.gradient_shard = bytes(program_.grad_shard_buffer);
  for (const parallel::BucketLayout& b : program_.buckets) m.gradient_buckets += bytes(b.grad_buffer);
  m.gradient_buffer_peak = buffers_.gradient_peak_bytes();
  m.gathered_parameter_peak = buffers_.parameter_peak_bytes();
  m.optimizer_state = optimizer_ ? optimizer_->state_bytes() : 0;
  return m;
}

}  // namespace px
