// Collective instructions: handed to their lane (collective_lanes.h), plain
// or through their gradient's codec (gradient_codecs.h), and what the step
// sent, per mesh axis and for its gradients.
#include <algorithm>

#include "comm/wire_bytes.h"
#include "kernels/elementwise.h"
#include "runtime/executor/program_executor.h"

namespace px {

using parallel::Buffer;

void ProgramExecutor::collective(int id, const parallel::Collective& op, uint64_t step) {
  const parallel::Program& p = prog();
  comm::Communicator* group = groups_.communicator_of(p, p.instrs[static_cast<size_t>(id)]);
  if (group == nullptr) {  // a group of one rank: a reduce-scatter or gather to another buffer is a copy
    if (op.output.buffer < 0) return;
    if (p.buffers[static_cast<size_t>(op.input.buffer)].kind == Buffer::Kind::grad_bucket)
      buffers_.zero_unwritten(op.input.buffer);
    PX_CHECK_EQ(op.input.count, op.output.count);
    PX_CHECK(p.buffers[static_cast<size_t>(op.output.buffer)].dtype == DType::f32,
             "collective #{}: a group of one copies float32 buffers only", id);
    const float* from = buffers_.data(op.input);
    float* into = buffers_.data(op.output);
    if (from == into) return;
    if (op.accumulate) kernels::add_inplace(op.input.count, from, into);
    else std::copy_n(from, op.input.count, into);
    return;
  }
  if (p.buffers[static_cast<size_t>(op.input.buffer)].kind == Buffer::Kind::grad_bucket)
    buffers_.zero_unwritten(op.input.buffer);
  const double start = comm::now_us();
  std::span<float> input(buffers_.data(op.input), static_cast<size_t>(op.input.count));
  const float* agreed = op.agreement.buffer >= 0 ? buffers_.data(op.agreement) : nullptr;
  const bool queued = lanes_.run(p, id, op, buffers_, *group, codecs_.exchange(id, input, agreed, step, op.momentum));
  if (!queued && trace_.on)
    trace_.add(TraceRecord::Lane::comm, start, op.input.count * static_cast<int64_t>(sizeof(float)),
               static_cast<int64_t>(step), id);
}

comm::compression::WireStats ProgramExecutor::step_wire() const {
  // Gradient and parameter collectives: what the lowering stamped
  // (comm/wire_bytes.h), or what the codecs measured; the one-float loss,
  // norm and agreements aside.
  comm::compression::WireStats wire;
  const int p = groups_.data_path_size();
  if (p <= 1) return wire;
  if (compressing()) {
    wire.bytes_sent = codecs_.bytes_sent();
  } else {
    for (const parallel::Instr& instr : prog().instrs) {
      const auto* c = std::get_if<parallel::Collective>(&instr.op);
      if (c == nullptr) continue;
      const Buffer::Kind kind = prog().buffers[static_cast<size_t>(c->input.buffer)].kind;
      if (kind == Buffer::Kind::loss || kind == Buffer::Kind::norm || kind == Buffer::Kind::flags) continue;
      wire.bytes_sent += static_cast<uint64_t>(instr.wire.total());
    }
  }
  wire.dense_bytes = static_cast<uint64_t>(
      comm::wire_bytes({.options = {.algorithm = comm::Algorithm::ring},
                        .bytes = prog().param_count * static_cast<int64_t>(sizeof(float)),
                        .ranks = p})
          .total());
  return wire;
}

uint64_t ProgramExecutor::axis_bytes_sent(size_t axis) const {
  const comm::Communicator* group = groups_.axis(static_cast<int>(axis));
  uint64_t sent = group != nullptr ? group->bytes_sent() : 0;
  // Under context parallelism the data path's group is its own, counted on
  // the data axis; a progress lane's collectives run on its engine's own
  // split of its group (whatever a step leaves in flight counts in the next).
  const comm::Communicator* data_path = groups_.data_path();
  const bool data_axis = static_cast<int>(axis) == prog().strategy.mesh.axis(prog().strategy.data_axis);
  if (data_axis && data_path != nullptr && data_path != group) sent += data_path->bytes_sent();
  return sent + lanes_.bytes_sent(static_cast<int>(axis));
}

void ProgramExecutor::collect_engine_trace() {
  flight_.done_where([this](int id) { return lanes_.finished(id); });
  lanes_.collect(trace_.on ? &trace_.records : nullptr, static_cast<int64_t>(step_.step));
}

}  // namespace px
