// Collective instructions on the lane the program names (parallel/program.h):
// queued on the rank's progress engine (overlap; P3 slices by the
// program's priorities), or inline on their group's communicator, plain or
// through a compression codec with error feedback.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "comm/collectives.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "runtime/executor/program_executor.h"

namespace px {

using parallel::Buffer;

std::unique_ptr<ProgramExecutor::Codec> ProgramExecutor::make_codec(const parallel::Collective& op) const {
  const Buffer& buffer = program_.buffers[static_cast<size_t>(op.input.buffer)];
  PX_CHECK_EQ(buffer.members.size(), 1u);
  auto codec = std::unique_ptr<Codec>(new Codec{
      buffer.members.front().name,
      comm::compression::GradientCompressor(op.codec, op.input.count, op.codec_rows, op.codec_cols, 0x9e3779b9u),
      {}});
  if (op.momentum > 0) codec->velocity.assign(static_cast<size_t>(op.input.count), 0.0f);
  return codec;
}

comm::compression::WireStats ProgramExecutor::step_wire() const {
  // Gradient and parameter collectives: what the lowering stamped
  // (comm/wire_bytes.h), or what the codecs measured; the one-float loss,
  // norm and agreements aside.
  comm::compression::WireStats wire;
  const int p = group_ ? group_->size() : 1;
  if (p <= 1) return wire;
  for (size_t i = 0; i < program_.instrs.size(); ++i) {
    const auto* c = std::get_if<parallel::Collective>(&program_.instrs[i].op);
    if (c == nullptr) continue;
    const Buffer::Kind kind = program_.buffers[static_cast<size_t>(c->input.buffer)].kind;
    if (kind == Buffer::Kind::loss || kind == Buffer::Kind::norm || kind == Buffer::Kind::flags) continue;
    wire.bytes_sent += compressing() ? wire_[i].bytes_sent : static_cast<uint64_t>(program_.instrs[i].wire.total());
  }
  wire.dense_bytes = static_cast<uint64_t>(
      comm::wire_bytes({.options = {.algorithm = comm::Algorithm::ring},
                        .bytes = program_.param_count * static_cast<int64_t>(sizeof(float)),
                        .ranks = p})
          .total());
  return wire;
}

comm::CollectiveOptions ProgramExecutor::options_of(const parallel::Instr& instr) const {
  comm::CollectiveOptions options = program_.collective;
  if (instr.algorithm != comm::Algorithm::automatic) options.algorithm = instr.algorithm;
  return options;
}

comm::Communicator* ProgramExecutor::communicator_of(const parallel::Instr& instr) {
  const parallel::CommGroup& group = program_.groups[static_cast<size_t>(instr.group)];
  if (group.subgroup >= 0) return &transfers_->subgroup(group.subgroup);
  return group.context_axis >= 0 ? data_group_ : groups_[static_cast<size_t>(group.axis)];
}

// A compressed gradient's exchange through its codec, as a job on either
// lane. `agreed` is the flag the ranks agreed on before it on its lane
// (the program's Finite and its max allreduce): set, the gradient must
// not enter the error-feedback state, and NaN goes on to the norm, so
// every rank skips the step (and puts back every codec's state from
// before it).
std::function<void(comm::Communicator&)> ProgramExecutor::compressed_exchange(Codec* codec, std::span<float> input,
                                                                             const float* agreed, uint64_t step,
                                                                             double momentum,
                                                                             comm::compression::WireStats* wire) {
  return [codec, input, agreed, step, momentum, wire](comm::Communicator& comm) {
    codec->state_before = codec->compressor.state();
    codec->velocity_before = codec->velocity;
    if (*agreed > 0) {
      std::fill(input.begin(), input.end(), std::numeric_limits<float>::quiet_NaN());
      return;
    }
    if (codec->velocity.empty()) {
      *wire = codec->compressor.allreduce_sum(comm, input, step);
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
    *wire = codec->compressor.allreduce_sum(comm, input, step);
    residual = codec->compressor.residual();
    if (residual.size() == u.size())
      for (size_t i = 0; i < u.size(); ++i)
        if (residual[i] != kept[i]) u[i] = 0.0f;
  };
}

void ProgramExecutor::collective(int id, const parallel::Collective& op, uint64_t step) {
  const parallel::Instr& instr = program_.instrs[static_cast<size_t>(id)];
  comm::Communicator* group = communicator_of(instr);
  if (group == nullptr) return;  // an axis of one rank
  if (program_.buffers[static_cast<size_t>(op.input.buffer)].kind == Buffer::Kind::grad_bucket)
    buffers_.zero_unwritten(op.input.buffer);
  // The lane the program names: the progress engine, or inline here.
  const bool queued = instr.lane.kind == parallel::Lane::Kind::progress && engine_ != nullptr;
  const int priority = instr.priority;
  const int64_t bytes = op.input.count * static_cast<int64_t>(sizeof(float));
  std::span<float> input(buffers_.data(op.input), static_cast<size_t>(op.input.count));
  const double start = comm::now_us();
  JobId& job = job_[static_cast<size_t>(id)];
  if (auto it = codecs_.find(id); it != codecs_.end()) {
    PX_CHECK(op.agreement.buffer >= 0, "compressed collective #{} without the ranks' agreement", id);
    auto work = compressed_exchange(it->second, input, buffers_.data(op.agreement), step, op.momentum,
                                    &wire_[static_cast<size_t>(id)]);
    if (queued) job = engine_->submit(priority, instr.name, work, bytes);
    else work(*group);
  } else {
    const comm::Buffer output = op.output.buffer >= 0 ? buffers_.comm_buffer(op.output) : comm::Buffer();
    job = dense(op, instr, input, output, queued ? priority : -1, *group);
    PX_CHECK(queued == (job >= 0), "instruction #{}: queued {} but job {}", id, queued, job);
  }
  if (queued) {
    instr_of_job_[job] = id;
  } else if (tracing_) {
    trace_.push_back({.name = {},
                      .lane = TraceRecord::Lane::comm,
                      .start_us = start,
                      .duration_us = comm::now_us() - start,
                      .bytes = bytes,
                      .step = static_cast<int64_t>(step),
                      .instr = id});
  }
}

// A plain collective: queued on the engine when `priority` >= 0 (its job),
// else run here (-1).
ProgramExecutor::JobId ProgramExecutor::dense(const parallel::Collective& op, const parallel::Instr& instr,
                                              std::span<float> input, comm::Buffer output, int priority,
                                              comm::Communicator& group) {
  const bool queued = priority >= 0;
  const std::string& name = instr.name;
  const comm::CollectiveOptions collective = options_of(instr);
  const comm::Algorithm algorithm = instr.algorithm;
  const int64_t bytes = static_cast<int64_t>(input.size() * sizeof(float));
  switch (op.kind) {
    case comm::Collective::allreduce:
      if (queued) return engine_->allreduce(input, priority, name, op.op, algorithm);
      comm::allreduce(group, input, op.op, collective);
      return -1;
    case comm::Collective::reduce_scatter: {
      PX_CHECK(output.dtype == DType::f32, "'{}': a reduction into a {} buffer", name, dtype_name(output.dtype));
      const std::span<float> reduced(static_cast<float*>(output.data), static_cast<size_t>(output.count));
      if (!op.accumulate) {
        if (queued) return engine_->reduce_scatter(input, reduced, priority, name, op.op, algorithm);
        comm::reduce_scatter(group, input.data(), output, static_cast<int64_t>(input.size()), op.op, collective);
        return -1;
      }
      // A later micro-batch adds its reduced block into the shard.
      auto reduce_and_add = [input, output = reduced, collective, reduction = op.op](comm::Communicator& comm) {
        std::vector<float> part(output.size());
        comm::reduce_scatter(comm, input.data(), comm::Buffer(std::span<float>(part)),
                             static_cast<int64_t>(input.size()), reduction, collective);
        kernels::add_inplace(static_cast<int64_t>(part.size()), part.data(), output.data());
      };
      if (queued) return engine_->submit(priority, name, reduce_and_add, bytes);
      reduce_and_add(group);
      return -1;
    }
    case comm::Collective::allgather: {
      // The input may be this rank's block of the output itself: gather from
      // a copy, in the output's dtype (a bf16 bucket: rounded here, so the
      // wire carries half the bytes).
      Tensor staged = Tensor::empty({static_cast<int64_t>(input.size())}, output.dtype);
      if (output.dtype == DType::bf16)
        kernels::to_bf16(staged.numel(), input.data(), static_cast<kernels::bf16*>(staged.raw()));
      else
        std::copy(input.begin(), input.end(), staged.f32());
      if (!queued) {
        comm::allgather(group, staged.raw(), output, collective);
        return -1;
      }
      const JobId job =
          output.dtype == DType::f32
              ? engine_->allgather(std::span<const float>(staged.f32(), input.size()),
                                   std::span<float>(static_cast<float*>(output.data), static_cast<size_t>(output.count)),
                                   priority, name, algorithm)
              : engine_->submit(
                    priority, name,
                    [in = staged.raw(), output, collective](comm::Communicator& comm) {
                      comm::allgather(comm, in, output, collective);
                    },
                    static_cast<int64_t>(output.bytes()));
      staging_[job] = std::move(staged);
      return job;
    }
    default:
      fail("executor: collective {} ('{}') is not run by data-parallel programs", comm::collective_name(op.kind),
           name);
  }
}

void ProgramExecutor::collect_engine_trace() {
  flight_.done_where([this](int id) { return job_finished(id); });
  // Staged allgather inputs are released once their jobs are done.
  for (auto it = staging_.begin(); it != staging_.end();)
    it = engine_->finished(it->first) ? staging_.erase(it) : std::next(it);
  std::vector<comm::TraceEvent> events = engine_->take_trace();
  if (tracing_)
    for (const comm::TraceEvent& e : events) {
      auto it = instr_of_job_.find(e.job);
      trace_.push_back({.name = e.slices > 1 ? fmt::format("{} [{}/{}]", e.name, e.slice + 1, e.slices) : e.name,
                        .lane = TraceRecord::Lane::progress,
                        .start_us = e.start_us,
                        .duration_us = e.duration_us,
                        .bytes = e.bytes,
                        .step = static_cast<int64_t>(step_),
                        .instr = it == instr_of_job_.end() ? -1 : it->second});
    }
  for (auto it = instr_of_job_.begin(); it != instr_of_job_.end();)
    it = engine_->finished(it->first) ? instr_of_job_.erase(it) : std::next(it);
}

}  // namespace px
