// The instructions that run on the calling thread without talking to
// another rank: compute (a node's kernel), accumulate, norm, clip, update
// (and P3's deferred updates), and the bookkeeping of forward activations.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/elementwise.h"
#include "runtime/executor/program_executor.h"

namespace px {

using parallel::Buffer;
using parallel::Instr;
using parallel::Region;

void ProgramExecutor::compute(int id, const parallel::Compute& op, const StepInput& input) {
  const Instr& instr = prog().instrs[static_cast<size_t>(id)];
  const int m = instr.micro_batch;
  const Graph& g = prog().graph_of(m);
  const Node& node = g.nodes()[static_cast<size_t>(op.node)];
  std::vector<Tensor>& live = live_[static_cast<size_t>(m)];
  std::vector<Tensor> params;  // views that must outlive the call
  std::vector<const Tensor*> in;
  params.reserve(node.inputs.size());
  for (ValueId v : node.inputs) {
    const int param = params_.of_value[static_cast<size_t>(v)];
    if (param >= 0) {
      params.push_back(params_.external.empty() ? buffers_.view(prog().param_source(param)).reshape(g.spec(v).shape)
                                                : params_.external[static_cast<size_t>(param)]);
      in.push_back(&params.back());
      continue;
    }
    if (!live[static_cast<size_t>(v)].defined())
      fail("executor: node '{}' ({}) reads value '{}' which was not fed or computed", node.name, node.op(),
           g.value(v).name);
    in.push_back(&live[static_cast<size_t>(v)]);
  }
  // The rows a routed exchange brought (executor_route.cc) are as many as
  // arrived, not the spec's: the outputs then follow the op's shape rule
  // on the inputs as they are.
  bool resized = false;
  for (size_t i = 0; i < node.inputs.size(); ++i) resized = resized || in[i]->shape() != g.spec(node.inputs[i]).shape;
  std::vector<TensorSpec> resized_outputs;  // empty unless an input is not its spec's shape
  if (resized) {
    std::vector<TensorSpec> actual;
    for (size_t i = 0; i < node.inputs.size(); ++i) actual.push_back({in[i]->shape(), g.spec(node.inputs[i]).dtype});
    resized_outputs = node.def->infer(actual, node.attrs);
    for (size_t o = 0; o < resized_outputs.size(); ++o) resized_outputs[o].dtype = g.spec(node.outputs[o]).dtype;
  }
  std::vector<Tensor*> out;
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const ValueId v = node.outputs[i];
    const TensorSpec& spec = resized ? resized_outputs[i] : g.spec(v);
    const bool view = i == 0 && node.def->output_is_view;
    live[static_cast<size_t>(v)] = view ? in[0]->reshape(spec.shape) : Tensor::empty(spec.shape, spec.dtype);
    // Forward nodes have no origin; a view shares its input's storage.
    if (view) ledger_.alias(m, v, node.inputs.front());
    else ledger_.produce(m, v, static_cast<double>(live[static_cast<size_t>(v)].nbytes()), node.origin < 0);
    out.push_back(&live[static_cast<size_t>(v)]);
  }
  // Where the shards sit in the unsplit values: the lowering's boxes plus
  // the micro-batch's global rows on the batch dim.
  const std::vector<ShardBox>& boxes = prog().boxes[static_cast<size_t>(prog().micro_batches[static_cast<size_t>(m)].graph)];
  const int64_t rows = input.row_offset + prog().micro_batches[static_cast<size_t>(m)].row_offset;
  auto box_of = [&](ValueId v) {
    ShardBox box = boxes[static_cast<size_t>(v)];
    if (prog().batch_rows[static_cast<size_t>(v)] && !box.offset.empty()) box.offset[0] += rows;
    return box;
  };
  OpContext context{.seed = input.seed, .inputs = {}, .outputs = {}};
  for (ValueId v : node.inputs) context.inputs.push_back(box_of(v));
  for (ValueId v : node.outputs) context.outputs.push_back(box_of(v));
  const double start = trace_.on ? comm::now_us() : 0;
  node.def->forward(context, node.attrs, in, out);
  if (trace_.on) trace_.add(TraceRecord::Lane::compute, start, 0, static_cast<int64_t>(input.step), id);
}

void ProgramExecutor::use_parameters(const ParamStore& store) {
  PX_CHECK(!optimizer_.has_value(), "use_parameters: this program updates its own parameters");
  params_.external.clear();
  for (const parallel::ParamLayout& param : prog().params) {
    const Tensor& t = store.at(param.name);
    if (t.shape() != param.shape)
      fail("parameter '{}' has shape {}, the program expects {}", param.name, t.shape(), param.shape);
    params_.external.push_back(t);
  }
}

void ProgramExecutor::accumulate(int id, const parallel::Accumulate& op) {
  const Instr& instr = prog().instrs[static_cast<size_t>(id)];
  const Tensor& from = live_[static_cast<size_t>(instr.micro_batch)][static_cast<size_t>(op.from)];
  PX_CHECK(from.defined() && from.numel() == op.into.count, "accumulate #{}: value {} has {} elements, region {}", id,
           op.from, from.defined() ? from.numel() : -1, op.into.count);
  const int member = active().member_of[static_cast<size_t>(id)];
  PX_CHECK_GE(member, 0);
  std::vector<bool>& written = buffers_.written(op.into.buffer);
  float* into = buffers_.data(op.into);
  if (!written[static_cast<size_t>(member)]) {
    std::memcpy(into, from.f32(), static_cast<size_t>(op.into.count) * sizeof(float));
    written[static_cast<size_t>(member)] = true;
  } else {
    kernels::add_inplace(op.into.count, from.f32(), into);
  }
  if (op.into.buffer == prog().loss_buffer) {
    if (step_.poison) into[0] = std::numeric_limits<float>::quiet_NaN();
    // The loss is reduced on the comm stream, maybe while the norm is
    // summed: the norm learns of a bad summand from this flag, not by
    // reading the buffer.
    if (!std::isfinite(from.f32()[0]) || step_.poison) step_.local_loss_bad = true;
  } else if (step_.poison && !step_.poisoned) {
    into[0] = std::numeric_limits<float>::quiet_NaN();  // reduced to every rank like any gradient
    step_.poisoned = true;
  }
}

void ProgramExecutor::norm(const parallel::Norm& op) {
  float* squares = buffers_.data(op.into);
  std::fill(squares, squares + op.into.count, 0.0f);
  for (size_t i = 0; i < op.gradients.size(); ++i) {
    const Region& r = op.gradients[i];
    buffers_.zero_unwritten(r.buffer);
    const double weight = i < op.weights.size() ? op.weights[i] : 1.0;
    squares[op.params[i]] += static_cast<float>(kernels::sum_squares(r.count, buffers_.data(r)) * weight);
  }
  // A non-finite loss summand makes the global norm NaN on every rank (the
  // norm is summed over every axis), so all ranks skip the step together.
  if (step_.local_loss_bad && op.into.count > 0) squares[0] = std::numeric_limits<float>::quiet_NaN();
}

void ProgramExecutor::finite(const parallel::Finite& op) {
  buffers_.zero_unwritten(op.gradient.buffer);  // a rank without rows contributes zeros
  const float* g = buffers_.data(op.gradient);
  *buffers_.data(op.into) = std::all_of(g, g + op.gradient.count, [](float x) { return std::isfinite(x); }) ? 0.0f : 1.0f;
}

double ProgramExecutor::clip(const parallel::Clip& op, double clip) {
  // Norm's per-parameter squares, added in parameter order on every rank.
  const float* squares = buffers_.data(op.norm);
  double sum = 0;
  for (int64_t i = 0; i < op.norm.count; ++i) sum += squares[i];
  const double norm = std::sqrt(static_cast<double>(static_cast<float>(sum)));
  if (!std::isfinite(norm)) {
    step_.skip_updates = true;
    // Error feedback as if the step never ran (its reductions are done: the norm waited for them).
    codecs_.rollback();
    return norm;
  }
  if (clip > 0 && norm > clip) {
    const float scale = static_cast<float>(clip / (norm + 1e-6));
    for (const Region& r : op.gradients) kernels::scale(r.count, scale, buffers_.data(r), buffers_.data(r));
  }
  return norm;
}

void ProgramExecutor::update(int id, const parallel::Update& op, double lr) {
  buffers_.zero_unwritten(op.gradient.buffer);
  optimizer_->update(static_cast<size_t>(active().shard_of_update[static_cast<size_t>(id)]), buffers_.data(op.storage),
                     buffers_.data(op.gradient), lr);
}

}  // namespace px
