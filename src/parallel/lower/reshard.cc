#include "parallel/lower/reshard.h"

#include "core/error.h"

namespace px::parallel {

std::string_view resharding_name(Resharding r) {
  switch (r) {
    case Resharding::none: return "none";
    case Resharding::allreduce: return "allreduce";
    case Resharding::reduce_scatter: return "reduce_scatter";
    case Resharding::allgather: return "allgather";
    case Resharding::all_to_all: return "all_to_all";
    case Resharding::slice: return "slice";
  }
  return "?";
}

Resharding resharding(Placement from, Placement to) {
  using K = Placement::Kind;
  if (from == to) return Resharding::none;
  if (to.kind == K::partial)
    fail("resharding {} -> {}: no collective makes a partial value from a {} one", from.str(), to.str(),
         from.kind == K::broadcast ? "broadcast" : from.kind == K::split ? "split" : "differently reduced");
  if (from.kind == K::partial) return to.kind == K::broadcast ? Resharding::allreduce : Resharding::reduce_scatter;
  if (from.kind == K::split) return to.kind == K::broadcast ? Resharding::allgather : Resharding::all_to_all;
  return Resharding::slice;  // B -> S(d)
}

std::optional<comm::Collective> collective_of(Resharding r) {
  switch (r) {
    case Resharding::allreduce: return comm::Collective::allreduce;
    case Resharding::reduce_scatter: return comm::Collective::reduce_scatter;
    case Resharding::allgather: return comm::Collective::allgather;
    case Resharding::all_to_all: return comm::Collective::all_to_all;
    case Resharding::none:
    case Resharding::slice: return std::nullopt;
  }
  return std::nullopt;
}

Placement gradient_storage(int zero_stage) { return zero_stage >= 1 ? Placement::S(0) : Placement::B(); }
Placement parameter_storage(int zero_stage) { return zero_stage >= 3 ? Placement::S(0) : Placement::B(); }

std::vector<Transition> transitions(const Graph& graph, const Propagation& placement, int data_axis, ValueId loss,
                                    const std::vector<ParamGrad>& grads, const Strategy& strategy) {
  const auto at = [&](ValueId v) { return placement.of_value[static_cast<size_t>(v)][static_cast<size_t>(data_axis)]; };
  const Placement grad_storage = gradient_storage(strategy.zero_stage);
  const Placement param_storage = parameter_storage(strategy.zero_stage);
  std::vector<Transition> out;
  auto add = [&](Transition::Site site, ValueId v, Placement from, Placement to) {
    out.push_back({site, v, from, to, resharding(from, to)});
  };
  if (loss != kNoValue) add(Transition::Site::loss, loss, at(loss), Placement::B());
  for (const ParamGrad& pg : grads) {
    const std::string& name = graph.value(pg.param).name;
    if (at(pg.param) != Placement::B())
      fail("lowering: parameter '{}' is used {} along the data axis '{}'; data parallelism computes with whole "
           "weights (B)",
           name, at(pg.param).str(), strategy.data_axis);
    if (at(pg.grad) != Placement::P())
      fail("lowering: the gradient of '{}' comes out {} along '{}'; a replicated weight's gradient must be P", name,
           at(pg.grad).str(), strategy.data_axis);
    add(Transition::Site::parameter_use, pg.param, param_storage, at(pg.param));
    add(Transition::Site::gradient, pg.grad, at(pg.grad), grad_storage);
    // A sharded update leaves the shard S; replicated storage takes it back whole.
    if (strategy.zero_stage >= 1) add(Transition::Site::parameter_update, pg.param, Placement::S(0), param_storage);
  }
  return out;
}

}  // namespace px::parallel
