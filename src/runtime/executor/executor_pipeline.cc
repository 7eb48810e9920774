// Send and Recv instructions: the value a send posts (rounded to the
// dtype the later stages read) and where a received one is held; the
// communication itself is Transfers' (transfers.h). Also the parameters
// gathered from every pipeline stage, and the stash a micro-batch keeps.
#include <cstring>

#include "comm/collectives.h"
#include "kernels/bf16.h"
#include "runtime/executor/program_executor.h"

namespace px {

void ProgramExecutor::send(int id, const parallel::Send& op) {
  const int m = program_.instrs[static_cast<size_t>(id)].micro_batch;
  Tensor value = live_[static_cast<size_t>(m)][static_cast<size_t>(op.value)];
  PX_CHECK(value.defined(), "send #{}: value {} was not computed", id, op.value);
  if (value.dtype() != op.dtype) {  // a float32 value the later stages read at bf16 precision
    PX_CHECK(value.dtype() == DType::f32 && op.dtype == DType::bf16, "send #{}: {} as {}", id,
             dtype_name(value.dtype()), dtype_name(op.dtype));
    Tensor rounded = Tensor::empty(value.shape(), DType::bf16);
    kernels::to_bf16(value.numel(), value.f32(), static_cast<kernels::bf16*>(rounded.raw()));
    value = std::move(rounded);
  }
  transfers_->send(op, std::move(value), *groups_[static_cast<size_t>(op.axis)]);
}

void ProgramExecutor::recv(int id, const parallel::Recv& op, uint64_t step) {
  const parallel::Instr& instr = program_.instrs[static_cast<size_t>(id)];
  const int m = instr.micro_batch;
  const TensorSpec& spec = program_.graph_of(m).spec(op.value);
  PX_CHECK(spec.dtype == op.dtype, "recv #{}: the local graph holds {} as {}", id, dtype_name(op.dtype),
           dtype_name(spec.dtype));
  Tensor value = Tensor::empty(spec.shape, spec.dtype);
  const double start = tracing_ ? comm::now_us() : 0;
  transfers_->recv(op, value,
                   {.collective = op.axis == program_.pipeline.axis ? "pipeline receive" : "ring receive", .index = m});
  if (tracing_)
    trace_.push_back({.name = {},
                      .lane = TraceRecord::Lane::comm,
                      .start_us = start,
                      .duration_us = comm::now_us() - start,
                      .bytes = static_cast<int64_t>(value.nbytes()),
                      .step = static_cast<int64_t>(step),
                      .instr = id});
  // An activation from an earlier stage is held like one made here; a gradient is not.
  const Graph& g = program_.graph_of(m);
  hold(m, op.value, value, g.nodes()[static_cast<size_t>(g.value(op.value).producer)].origin < 0);
  live_[static_cast<size_t>(m)][static_cast<size_t>(op.value)] = std::move(value);
}

NamedTensors ProgramExecutor::gather_stages(NamedTensors mine) {
  const parallel::PipelineLayout& pipeline = program_.pipeline;
  comm::Communicator& axis = *groups_[static_cast<size_t>(pipeline.axis)];
  const int me = program_.coords[static_cast<size_t>(pipeline.axis)];
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
                    program_.collective);
    all.emplace_back(p.name, std::move(t));
  }
  return all;
}

int64_t ProgramExecutor::stashed_bytes_per_micro_batch() const {
  int micro = -1;
  for (size_t m = 0; m < program_.micro_batches.size() && micro < 0; ++m)
    if (program_.micro_batches[m].rows > 0) micro = static_cast<int>(m);
  if (micro < 0) return 0;
  const Graph& g = program_.graph_of(micro);
  auto node_of = [&](const parallel::Instr& instr) -> const Node* {
    if (const auto* c = std::get_if<parallel::Compute>(&instr.op)) return &g.nodes()[static_cast<size_t>(c->node)];
    if (const auto* r = std::get_if<parallel::Reshard>(&instr.op)) return &g.nodes()[static_cast<size_t>(r->node)];
    return nullptr;
  };
  auto stored = [&](ValueId v) {  // made by forward into storage of its own (not a view)
    const Value& value = g.value(v);
    if (value.producer < 0) return false;
    const Node& node = g.nodes()[static_cast<size_t>(value.producer)];
    return node.origin < 0 && !(value.output_index == 0 && node.def->output_is_view);
  };
  // Storage made before the micro-batch's backward began whose last holder
  // a backward node frees (a view holds its input's storage, as the
  // activation count has it).
  std::vector<ValueId> storage(g.values().size(), kNoValue);
  std::vector<int> sharers(g.values().size(), 0);
  auto own = [&](ValueId v) {
    storage[static_cast<size_t>(v)] = v;
    sharers[static_cast<size_t>(v)] = 1;
  };
  bool backward = false;
  int64_t bytes = 0;
  for (size_t i = 0; i < program_.instrs.size(); ++i) {
    const parallel::Instr& instr = program_.instrs[i];
    if (instr.micro_batch != micro) continue;
    const Node* node = node_of(instr);
    if (node != nullptr) {
      backward = backward || node->origin >= 0;
      for (size_t o = 0; o < node->outputs.size() && !backward; ++o) {
        const ValueId v = node->outputs[o];
        if (stored(v)) {
          own(v);
        } else if (o == 0 && node->def->output_is_view && storage[static_cast<size_t>(node->inputs.front())] != kNoValue) {
          storage[static_cast<size_t>(v)] = storage[static_cast<size_t>(node->inputs.front())];
          ++sharers[static_cast<size_t>(storage[static_cast<size_t>(v)])];
        }
      }
      for (ValueId v : liveness_.values[i]) {
        const ValueId held = storage[static_cast<size_t>(v)];
        if (held == kNoValue) continue;
        storage[static_cast<size_t>(v)] = kNoValue;
        if (--sharers[static_cast<size_t>(held)] == 0 && node->origin >= 0)
          bytes += static_cast<int64_t>(g.spec(held).bytes());
      }
    } else if (const auto* r = std::get_if<parallel::Recv>(&instr.op)) {
      if (!backward && stored(r->value)) own(r->value);
    }
  }
  return bytes;
}

}  // namespace px
