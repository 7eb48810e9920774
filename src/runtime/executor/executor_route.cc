// Route instructions: expert parallelism's routed exchange
// (runtime/executor/expert_exchange.h) over the expert axis' group, inline
// on the compute lane (the experts wait for their rows). The rows that
// arrive are as many as the ranks routed to this rank's experts: the
// value is sized by the agreed counts, not by its spec (a balanced
// routing's), and the experts' ops that follow run on what arrived.
#include "runtime/executor/expert_exchange.h"
#include "runtime/executor/program_executor.h"

namespace px {

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
  const RouteHeader header{.site = id,
                           .experts = node.attrs.get_int("experts"),
                           .capacity_factor = node.attrs.get_float("capacity_factor", 0.0) + routing_fault_.capacity_shift,
                           .bad_row = -1,
                           .bad_expert = -1};
  const std::string where = fmt::format("layer '{}' (micro-batch {})", node.name, m);
  Tensor routed_choice;  // an injected route to a missing expert (--inject-fault RANK:STEP:moe-expert)
  const int32_t* choices = choice.data<int32_t>();
  if (routing_fault_.missing_expert && choice.numel() > 0) {
    routed_choice = choice.clone();
    routed_choice.data<int32_t>()[0] = static_cast<int32_t>(header.experts);
    choices = routed_choice.data<int32_t>();
  }
  const RoutePlan plan(*group, header, choices, choice.numel(), where);
  const bool dispatch = node.op() == "moe_dispatch";
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
