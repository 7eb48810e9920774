#include "parallel/lower.h"

#include "core/error.h"
#include "graph/autodiff.h"
#include "parallel/lower/passes.h"

namespace px::parallel {

namespace passes {

const Transition& Context::transition(Transition::Site site, ValueId value) const {
  for (const Transition& t : transitions)
    if (t.site == site && t.value == value) return t;
  PX_CHECK(false, "no transition for value {} ({})", value, graph.value(value).name);
  return transitions.front();
}

}  // namespace passes

namespace {

// Seeds along the data axis, by value id (every input and parameter; B unless named).
std::vector<Placement> data_axis_seeds(const Graph& graph, const Strategy& strategy) {
  std::vector<Placement> seeds(graph.values().size(), Placement::B());
  for (const PlacementSeed& seed : strategy.seeds) {
    if (seed.axis != strategy.data_axis) continue;
    seeds[static_cast<size_t>(graph.find(seed.value))] = seed.placement;
  }
  return seeds;
}

}  // namespace

Program lower(const LowerRequest& request, const Strategy& strategy, int rank) {
  PX_CHECK(request.forward != nullptr, "lower: no graph");
  validate(strategy);
  if (rank < 0 || rank >= strategy.mesh.ranks())
    fail("lowering: rank {} is outside mesh {} of {} ranks", rank, strategy.mesh.str(), strategy.mesh.ranks());
  Graph graph = *request.forward;  // backward is added to a copy
  const int forward_nodes = static_cast<int>(graph.nodes().size());
  std::vector<ParamGrad> grads;
  if (request.training) {
    Gradients g = build_backward(graph, request.loss, graph.params());
    for (ValueId p : graph.params()) grads.push_back({p, g.at(p)});
  } else {
    for (ValueId p : graph.params()) grads.push_back({p, kNoValue});
  }
  const int axis = strategy.mesh.axis(strategy.data_axis);
  const std::vector<int> coords = strategy.mesh.coords(rank);
  passes::Context context{.graph = graph,
                          .strategy = strategy,
                          .data_rank = coords[static_cast<size_t>(axis)],
                          .data_size = strategy.data_ranks(),
                          .data_axis = axis,
                          .zero_stage = strategy.data_ranks() > 1 ? strategy.zero_stage : 0,
                          .forward_nodes = forward_nodes,
                          .loss = request.loss,
                          .grads = {},
                          .placement = propagate(graph, data_axis_seeds(graph, strategy)),
                          .transitions = {}};
  Strategy effective = strategy;
  effective.zero_stage = context.zero_stage;
  std::vector<ParamGrad> with_gradients;
  for (const ParamGrad& pg : grads)
    if (pg.grad != kNoValue) with_gradients.push_back(pg);
  context.transitions = transitions(graph, context.placement, request.loss, with_gradients, effective);
  context.grads = grads;

  Program program;
  program.strategy = strategy;
  program.rank = rank;
  program.coords = coords;
  program.loss = request.loss;
  program.outputs = request.outputs;
  program.training = request.training;
  passes::localize(context, program);
  passes::buckets(context, program);
  passes::schedule(context, program);
  passes::optimizer(context, program);
  passes::frees(program);
  return program;
}

Program lower_single(const Graph& forward, ValueId loss, const std::vector<ValueId>& outputs,
                     const std::vector<std::string>& batch_inputs, bool training) {
  Strategy strategy = data_parallel(1, batch_inputs);
  strategy.lowering.updates = false;
  strategy.lowering.global_norm = false;
  return lower({.forward = &forward, .loss = loss, .outputs = outputs, .training = training}, strategy, 0);
}

}  // namespace px::parallel
