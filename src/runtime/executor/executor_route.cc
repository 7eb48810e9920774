// Route instructions: expert parallelism's routed exchange
// (runtime/executor/expert_exchange.h) over the expert axis' group: inline
// on the compute lane (the experts wait for their rows), or, when the
// schedule interleaved two micro-batches around it (Route::overlapped), a
// job of the expert axis' engine whose outputs join the micro-batch's
// values when a reader waits for it (wait_for). The rows that
// arrive are as many as the ranks routed to this rank's experts: the
// value is sized by the agreed counts, not by its spec (a balanced
// routing's), and the experts' ops that follow run on what arrived. A
// dispatch carries the memory guard's check (runtime/fault/memory_guard.h):
// the rows beyond the plan times what a row holds through the layer,
// against the machine's available memory, on every rank alike.
#include <algorithm>

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
  const std::vector<Tensor>& live = live_[static_cast<size_t>(m)];
  // Held by the exchange (the loop may drop them from live_ while it runs on an engine).
  Tensor rows = live[static_cast<size_t>(node.inputs[0])];
  Tensor choice = live[static_cast<size_t>(node.inputs[1])];
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
  if (routing_fault_.missing_expert && choice.numel() > 0) {  // --inject-fault RANK:STEP:moe-expert
    choice = choice.clone();
    choice.data<int32_t>()[0] = static_cast<int32_t>(header.experts);
  }
  auto arrived = std::make_shared<std::vector<Tensor>>();  // the node's outputs, once exchanged
  const Shape tokens = g.spec(node.outputs[0]).shape;
  auto exchange = [header, rows, choice, dispatch, tokens, arrived,
                   where = fmt::format("layer '{}' (micro-batch {})", node.name, m)](comm::Communicator& comm) {
    const RoutePlan plan(comm, header, choice.data<int32_t>(), choice.numel(), where);
    if (dispatch) {
      Tensor experts;
      Tensor to_experts = plan.dispatch(comm, rows, experts);
      *arrived = {std::move(to_experts), std::move(experts)};
    } else {
      *arrived = {plan.undispatch(comm, rows, tokens)};
    }
  };
  const auto bytes = static_cast<int64_t>(rows.nbytes());
  if (lanes_.submit(prog(), id, std::move(exchange), *group, bytes)) {
    routes_in_flight_[id] = std::move(arrived);  // its readers wait for it (wait_for)
    return;
  }
  routed(id, std::move(*arrived), false);
  if (trace_.on) trace_.add(TraceRecord::Lane::comm, start, bytes, static_cast<int64_t>(input.step), id);
}

void ProgramExecutor::routed(int id, std::vector<Tensor> outputs, bool late) {
  const parallel::Instr& instr = prog().instrs[static_cast<size_t>(id)];
  const int m = instr.micro_batch;
  const Node& node = prog().graph_of(m).nodes()[static_cast<size_t>(std::get<parallel::Route>(instr.op).node)];
  PX_CHECK_EQ(outputs.size(), node.outputs.size());
  // Dropped at the Route itself (no reader): the loop did so before an engine's job made it.
  const std::vector<ValueId>& unread = active().liveness.values[static_cast<size_t>(id)];
  for (size_t i = 0; i < outputs.size(); ++i) {
    const ValueId out = node.outputs[i];
    if (late && std::find(unread.begin(), unread.end(), out) != unread.end()) continue;
    ledger_.produce(m, out, static_cast<double>(outputs[i].nbytes()), node.origin < 0);
    live_[static_cast<size_t>(m)][static_cast<size_t>(out)] = std::move(outputs[i]);
  }
}

}  // namespace px
