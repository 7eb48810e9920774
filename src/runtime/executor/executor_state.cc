// What outlives a step: the parameters (whole, or this rank's ZeRO-3
// shard), the optimizer state over the program's shards, the compression
// state, and the memory they take.
#include <cstring>
#include <map>

#include "comm/collectives.h"
#include "parallel/shard.h"
#include "runtime/executor/program_executor.h"
#include "runtime/state/program_state.h"

namespace px {

using parallel::Buffer;

namespace {

// A 1-D tensor holding a copy of `count` floats at `values`.
Tensor copy_of(const float* values, int64_t count) {
  Tensor t = Tensor::empty(Shape{count}, DType::f32);
  std::memcpy(t.f32(), values, static_cast<size_t>(count) * sizeof(float));
  return t;
}

// The gathered parameters of every pipeline stage (collective over the pipeline axis).
NamedTensors gather_stages(const parallel::Program& program, RankGroups& groups, NamedTensors mine) {
  const parallel::PipelineLayout& pipeline = program.pipeline;
  comm::Communicator& axis = *groups.axis(pipeline.axis);
  const int me = program.coords[static_cast<size_t>(pipeline.axis)];
  NamedTensors all;
  for (const parallel::PipelineLayout::Param& p : pipeline.params) {
    Tensor t;
    if (p.owner == me) {
      for (auto& [name, value] : mine)
        if (name == p.name) t = value.clone();
      PX_CHECK(t.defined(), "pipeline stage {} owns parameter '{}' but does not hold it", me, p.name);
    } else {
      t = Tensor::empty(p.shape, DType::f32);
    }
    comm::broadcast(axis, comm::Buffer(std::span<float>(t.f32(), static_cast<size_t>(t.numel()))), p.owner,
                    comm::options_for(program.collective, comm::Collective::broadcast));
    all.emplace_back(p.name, std::move(t));
  }
  return all;
}

// A parameter-shaped tensor of this rank's model shard -> the whole one
// (collective over the model axes that split it).
Tensor whole_of(const parallel::Program& program, RankGroups& groups, const Tensor& local,
                const parallel::ParamLayout& param) {
  if (!model_split(param)) return local;
  // Undo the splits one axis at a time, the inner axes first.
  Tensor t = local;
  parallel::AxisPlacements placement = param.placement;
  for (size_t a = placement.size(); a-- > 0;) {
    if (!placement[a].is_split() || groups.axis(static_cast<int>(a)) == nullptr) continue;
    const parallel::AxisPlacements was = placement;
    placement[a] = Placement::B();
    const Shape whole = parallel::local_shape(param.global_shape, placement, program.strategy.mesh, program.coords);
    t = reshard_tensor(*groups.axis(static_cast<int>(a)), t, was[a], Placement::B(), whole,
                       comm::options_for(program.collective, comm::Collective::allgather));
  }
  return t;
}

// ZeRO-3: every rank's blocks into `flat` (the parameter layout), collective over the data path
// (an expert bucket's over the data axis alone: BucketLayout::experts).
void gather_buckets(const parallel::Program& program, RankGroups& groups, std::vector<float>& flat) {
  std::vector<float> mine;
  const int data_axis = program.strategy.mesh.axis(program.strategy.data_axis);
  for (const parallel::BucketLayout& b : program.buckets) {
    comm::Communicator* group = b.experts ? groups.axis(data_axis) : groups.data_path();
    if (group == nullptr) continue;  // one rank holds the whole bucket
    mine.assign(flat.begin() + b.offset + b.block_begin, flat.begin() + b.offset + b.block_begin + b.block_count);
    comm::allgather(*group, mine.data(),
                    comm::Buffer(std::span<float>(flat.data() + b.offset, static_cast<size_t>(b.count))),
                    comm::options_for(program.collective, comm::Collective::allgather));
  }
}

}  // namespace

void ProgramExecutor::set_parameters(const ParamStore& store) {
  for (const parallel::ParamLayout& param : prog().params) {
    const Tensor value = local_of(prog(), store.at(param.name), param);
    if (prog().params_buffer >= 0) {
      std::memcpy(buffers_.storage(prog().params_buffer).f32() + param.offset, value.f32(),
                  static_cast<size_t>(value.numel()) * sizeof(float));
      continue;
    }
    const BucketPiece piece = bucket_piece(prog(), param);
    std::memcpy(buffers_.storage(prog().param_shard_buffer).f32() + piece.shard_offset,
                value.f32() + piece.begin, static_cast<size_t>(piece.end - piece.begin) * sizeof(float));
  }
}

ParamStore ProgramExecutor::parameters() {
  NamedTensors named;
  const auto by_name = layouts_by_name(prog());
  if (prog().params_buffer >= 0) {
    const Tensor& flat = buffers_.storage(prog().params_buffer);
    for (const std::string& name : params_.declared) {
      if (!by_name.count(name)) continue;  // another pipeline stage's
      const parallel::ParamLayout& p = *by_name.at(name);
      named.emplace_back(name, whole_of(prog(), groups_, flat.slice_rows(p.offset, p.offset + p.shape.numel()).reshape(p.shape), p));
    }
    if (prog().pipeline.axis >= 0) named = gather_stages(prog(), groups_, std::move(named));
    return ParamStore::of(std::move(named));
  }
  // ZeRO-3: every rank's blocks, bucket by bucket.
  std::vector<float> flat(static_cast<size_t>(prog().param_count));
  const float* shard = buffers_.storage(prog().param_shard_buffer).f32();
  for (const parallel::BucketLayout& b : prog().buckets)
    std::memcpy(flat.data() + b.offset + b.block_begin, shard + b.shard_offset,
                static_cast<size_t>(b.block_count) * sizeof(float));
  gather_buckets(prog(), groups_, flat);
  for (const std::string& name : params_.declared) {
    const parallel::ParamLayout& p = *by_name.at(name);
    Tensor t = Tensor::empty(p.shape, DType::f32);
    std::memcpy(t.f32(), flat.data() + p.offset, static_cast<size_t>(p.shape.numel()) * sizeof(float));
    named.emplace_back(name, whole_of(prog(), groups_, t, p));
  }
  return ParamStore::of(std::move(named));
}

std::span<float> ProgramExecutor::local_parameters() {
  PX_CHECK(prog().params_buffer >= 0 && params_.external.empty(),
           "the executor holds no flat parameters of its own (ZeRO-3 or use_parameters)");
  Tensor& flat = buffers_.storage(prog().params_buffer);
  return {flat.f32(), static_cast<size_t>(flat.numel())};
}

Tensor ProgramExecutor::gradient(const std::string& name) const {
  for (const parallel::ParamLayout& p : prog().params) {
    if (p.name != name) continue;
    const parallel::BucketLayout& b = prog().buckets.at(static_cast<size_t>(p.bucket));
    return buffers_.view({b.grad_buffer, p.offset - b.offset, p.shape.numel()}).reshape(p.shape);
  }
  fail("the program has no gradient of parameter '{}'", name);
}

std::vector<SavedRun> ProgramExecutor::state_runs(bool every_copy) const {
  PX_CHECK(optimizer_.has_value(), "the program has no optimizer");
  const auto by_name = layouts_by_name(prog());
  std::vector<SavedRun> runs;
  // Parameters: the whole model shard, or (ZeRO-3) this rank's block of it.
  const bool params_split = prog().params_buffer < 0;
  for (const std::string& name : params_.declared) {
    if (!by_name.count(name)) continue;  // another pipeline stage's
    const parallel::ParamLayout& p = *by_name.at(name);
    if (!writes_copy(prog(), p, params_split, every_copy)) continue;
    if (!params_split) {
      const float* values = buffers_.storage(prog().params_buffer).f32() + p.offset;
      runs.push_back({name, run_of(prog(), p, 0, p.shape.numel()), copy_of(values, p.shape.numel())});
      continue;
    }
    const BucketPiece piece = bucket_piece(prog(), p);
    if (piece.begin == piece.end) continue;
    const float* values = buffers_.storage(prog().param_shard_buffer).f32() + piece.shard_offset;
    runs.push_back({name, run_of(prog(), p, piece.begin, piece.end), copy_of(values, piece.end - piece.begin)});
  }
  // Optimizer state: one run per shard and slot (a whole model shard, or
  // under ZeRO the run of this rank's block).
  const bool state_split = prog().grad_shard_buffer >= 0;
  const std::vector<std::string> slot_names = optimizer_slot_names(optimizer_->config().kind);
  for (size_t slot = 0; slot < optimizer_->slot_count(); ++slot)
    for (size_t k = 0; k < optimizer_->shards().size(); ++k) {
      const ParamShard& s = optimizer_->shards()[k];
      const parallel::ParamLayout& p = *by_name.at(s.name);
      if (s.count == 0 || !writes_copy(prog(), p, state_split, every_copy)) continue;
      const std::span<const float> state = optimizer_->state(slot, k);
      runs.push_back({s.name + "." + slot_names[slot], run_of(prog(), p, s.offset, s.offset + s.count),
                      copy_of(state.data(), s.count)});
    }
  return runs;
}

void ProgramExecutor::load_state(const ShardedTensors& saved, int64_t optimizer_steps) {
  PX_CHECK(optimizer_.has_value(), "the program has no optimizer");
  for (const parallel::ParamLayout& p : prog().params) {
    if (prog().params_buffer >= 0) {
      const Tensor values = saved.read(p.name, run_of(prog(), p, 0, p.shape.numel()));
      std::memcpy(buffers_.storage(prog().params_buffer).f32() + p.offset, values.f32(),
                  values.nbytes());
      continue;
    }
    const BucketPiece piece = bucket_piece(prog(), p);
    if (piece.begin == piece.end) continue;
    const Tensor values = saved.read(p.name, run_of(prog(), p, piece.begin, piece.end));
    std::memcpy(buffers_.storage(prog().param_shard_buffer).f32() + piece.shard_offset, values.f32(),
                values.nbytes());
  }
  const auto by_name = layouts_by_name(prog());
  optimizer_->load(
      [&](const ParamShard& s, const std::string& slot) {
        const std::string key = s.name + "." + slot;
        if (!saved.contains(key))
          fail("checkpoint '{}' has no optimizer state '{}' (was it saved by another optimizer than {}?)",
               saved.where(), key, optimizer_->config().kind);
        return saved.read(key, run_of(prog(), *by_name.at(s.name), s.offset, s.offset + s.count));
      },
      optimizer_steps);
}

NamedTensors ProgramExecutor::gather_compression_state() {
  return compressing() ? codecs_.gather_state(*groups_.data_path()) : NamedTensors{};
}

void ProgramExecutor::load_compression_state(const SafetensorsFile& file) {
  codecs_.load_state(file, groups_.data_path() ? groups_.data_path()->rank() : 0);
}

ExecutorMemory ProgramExecutor::memory() const {
  auto bytes = [&](int buffer) {
    return buffer < 0 ? int64_t{0} : prog().buffers[static_cast<size_t>(buffer)].bytes();
  };
  ExecutorMemory m;
  m.parameters = bytes(prog().params_buffer) + bytes(prog().param_shard_buffer);
  m.gradient_shard = bytes(prog().grad_shard_buffer);
  for (const parallel::BucketLayout& b : prog().buckets) m.gradient_buckets += bytes(b.grad_buffer);
  m.gradient_buffer_peak = buffers_.gradient_peak_bytes();
  m.gathered_parameter_peak = buffers_.parameter_peak_bytes();
  m.optimizer_state = optimizer_ ? optimizer_->state_bytes() : 0;
  return m;
}

}  // namespace px
