// Route instructions: expert parallelism's routed exchange
// (runtime/executor/expert_exchange.h) over the expert axis' group, inline
// on the compute lane (the experts wait for their rows). The rows that
// arrive are as many as the ranks routed to this rank's experts: the
// value is sized by the agreed counts, not by its spec (a balanced
// routing's), and the experts' ops that follow run on what arrived. A
// dispatch carries the memory guard's check (runtime/fault/memory_guard.h):
// the rows beyond the plan times what a row holds through the layer,
// against the machine's available memory, on every rank alike.
#include "runtime/executor/expert_exchange.h"
#include "runtime/executor/program_executor.h"
#include "runtime/fault/memory_guard.h"

namespace px {
namespace {

// What each dispatched row holds until the layer's exchange back: the
// dispatch's outputs and every value made before the next moe_undispatch
// of the local graph (the experts' activations), over the rows planned.
double bytes_per_routed_row(const Graph& g, int dispatch, int64_t planned_rows) {
  double bytes = 0;
  for (int n = dispatch; n < static_cast<int>(g.nodes().size()); ++n) {
    const Node& node = g.nodes()[static_cast<size_t>(n)];
    if (n > dispatch && node.op() == "moe_undispatch") break;
    for (ValueId out : node.outputs) bytes += static_cast<double>(g.spec(out).bytes());
  }
  return planned_rows > 0 ? bytes / static_cast<double>(planned_rows) : 0;
}

}  // namespace

void ProgramExecutor::route(int id, const parallel::Route& op, const StepInput& input) {
  const parallel::Instr& instr = prog().instrs[static_cast<size_t>(id)];
  const int m = instr.micro_batch;
  const Graph& g = prog().graph_of(m);
  const Node& node = g.nodes()[static_cast<size_t>(op.node)];
  std::vector<Tensor>& live = live_[static_cast<size_t>(m)];
  const Tensor& rows = live[static_cast<size_t>(node.inputs[0])];
  const Tensor& choice = live[static_cast<size_t>(node.inputs[1])];
  PX_CHECK(rows.defined() && choice.defined(), "route #{}: its inputs were not computed", id);
  comm::Communicator* group = groups_.axis(op.axis);
  PX_CHECK(group != nullptr, "route #{}: the expert axis has one rank", id);
  const double start = comm::now_us();
  const bool dispatch = node.op() == "moe_dispatch";
  RouteHeader header{.site = id,
                     .experts = node.attrs.get_int("experts"),
                     .capacity_factor = node.attrs.get_float("capacity_factor", 0.0) + routing_fault_.capacity_shift,
                     .bad_row = -1,
                     .bad_expert = -1};
  if (dispatch) {  // the memory guard's check of the rows to come
    header.planned_rows = choice.numel();
    header.bytes_per_row = bytes_per_routed_row(g, op.node, header.planned_rows);
    header.available_bytes = available_memory().bytes;
  }
  const std::string where = fmt::format("layer '{}' (micro-batch {})", node.name, m);
  Tensor routed_choice;  // an injected route to a missing expert (--inject-fault RANK:STEP:moe-expert)
  const int32_t* choices = choice.data<int32_t>();
  if (routing_fault_.missing_expert && choice.numel() > 0) {
    routed_choice = choice.clone();
    routed_choice.data<int32_t>()[0] = static_cast<int32_t>(header.experts);
    choices = routed_choice.data<int32_t>();
  }
  const RoutePlan plan(*group, header, choices, choice.numel(), where);
  int64_t bytes = 0;
  if (dispatch) {
    Tensor experts;
    Tensor arrived = plan.dispatch(*group, rows, experts);
    bytes = static_cast<int64_t>(rows.nbytes());
    live[static_cast<size_t>(node.outputs[0])] = std::move(arrived);
    live[static_cast<size_t>(node.outputs[1])] = std::move(experts);
  } else {
    live[static_cast<size_t>(node.outputs[0])] = plan.undispatch(*group, rows, g.spec(node.outputs[0]).shape);
    bytes = static_cast<int64_t>(rows.nbytes());
  }
  for (ValueId out : node.outputs)
    ledger_.produce(m, out, static_cast<double>(live[static_cast<size_t>(out)].nbytes()), node.origin < 0);
  if (trace_.on) trace_.add(TraceRecord::Lane::comm, start, bytes, static_cast<int64_t>(input.step), id);
}

}  // namespace px
