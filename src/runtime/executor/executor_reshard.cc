// Reshard instructions: the one rule's collective on a local value along one
// mesh axis (parallel/lower/reshard.h), run inline on the axis' group while
// the compute stream waits for it (the value is needed next).
#include <algorithm>

#include "parallel/lower/reshard.h"
#include "runtime/executor/program_executor.h"

namespace px {

namespace {

// A batch value's rows along the data axis are the row split's
// (gather_batch_rows): gathered with their counts, sliced at this
// micro-batch's rows. The lowering refuses micro-batches with such a
// reshard (whose gathered rows would differ per micro-batch size), so this
// rank's rows of the whole batch are its micro-batch's.
Tensor reshard_batch_rows(comm::Communicator* comm, const Tensor& in, const parallel::Reshard& op,
                          const Shape& out_shape, const parallel::MicroBatch& micro_batch,
                          const comm::CollectiveOptions& options) {
  if (op.from.is_split()) return comm == nullptr ? in : gather_batch_rows(*comm, in, out_shape[0], options);
  return in.slice_rows(micro_batch.row_offset, micro_batch.row_offset + micro_batch.rows).clone();
}

// Whether `op` gathers or slices a batch value's rows along the data axis.
bool batch_rows_on_data_axis(const parallel::Program& program, const parallel::Reshard& op, const Node& node) {
  const parallel::Strategy& s = program.strategy;
  if (s.row_ranks() == 1 || op.axis != s.mesh.axis(s.data_axis)) return false;
  const bool gather = op.from == Placement::S(0) && !op.to.is_split() && !op.to.is_partial();
  const bool slice = op.to == Placement::S(0) && !op.from.is_split() && !op.from.is_partial();
  const ValueId batch_value = gather ? node.inputs.front() : node.outputs.front();
  return (gather || slice) && program.batch_rows[static_cast<size_t>(batch_value)];
}

}  // namespace

void ProgramExecutor::reshard(int id, const parallel::Reshard& op, const StepInput& input) {
  const parallel::Instr& instr = prog().instrs[static_cast<size_t>(id)];
  const int m = instr.micro_batch;
  const Graph& g = prog().graph_of(m);
  const Node& node = g.nodes()[static_cast<size_t>(op.node)];
  std::vector<Tensor>& live = live_[static_cast<size_t>(m)];
  const Tensor& in = live[static_cast<size_t>(node.inputs.front())];
  PX_CHECK(in.defined(), "reshard #{}: its input '{}' was not computed", id, g.value(node.inputs.front()).name);
  // Its group: the axis', or (expert parallelism's rows) the data path's.
  comm::Communicator* comm = instr.group >= 0 ? groups_.communicator_of(prog(), instr) : groups_.axis(op.axis);
  const double start = comm::now_us();
  // The value with this axis' split undone: the larger of the two sides,
  // or for an all-to-all (S(d) -> S(e)) the input with dim d as the
  // output has it.
  const Shape& out_shape = g.spec(node.outputs.front()).shape;
  Shape whole = op.from.is_split() && !op.to.is_split() ? out_shape : in.shape();
  if (op.from.is_split() && op.to.is_split()) {
    std::vector<int64_t> dims = in.shape().dims();
    dims[static_cast<size_t>(op.from.dim)] = out_shape[op.from.dim];
    whole = Shape(dims);
  }
  // A slice (B -> S) runs no collective: no options to take.
  const std::optional<comm::Collective> kind = parallel::collective_of(parallel::resharding(op.from, op.to));
  const comm::CollectiveOptions options = kind ? options_of(prog(), instr, *kind) : comm::CollectiveOptions{};
  Tensor out = batch_rows_on_data_axis(prog(), op, node)
                   ? reshard_batch_rows(comm, in, op, out_shape, prog().micro_batches[static_cast<size_t>(m)], options)
               : comm == nullptr ? in
                                 : reshard_tensor(*comm, in, op.from, op.to, whole, options);
  PX_CHECK(out.shape() == out_shape, "reshard #{} gives {}, the program expects {}", id, out.shape(), out_shape);
  live[static_cast<size_t>(node.outputs.front())] = out;
  // Held like a forward node's output when forward resharded it (the input
  // itself when there was nothing to move).
  if (out.raw() == in.raw()) ledger_.alias(m, node.outputs.front(), node.inputs.front());
  else ledger_.produce(m, node.outputs.front(), static_cast<double>(out.nbytes()), node.origin < 0);
  const auto bytes = static_cast<int64_t>(std::max(in.nbytes(), out.nbytes()));
  if (trace_.on) trace_.add(TraceRecord::Lane::comm, start, bytes, static_cast<int64_t>(input.step), id);
}

}  // namespace px
