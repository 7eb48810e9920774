#include "parallel/lower.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>

#include "core/error.h"
#include "graph/autodiff.h"
#include "graph/precision.h"
#include "parallel/compose.h"
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"
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

// The strategy's seeds by value id and axis. A seed names an input, a
// parameter or an activation (a node's output, by its name), forward or,
// named "<node>.grad" as autodiff names them, backward: a program without
// backward has none of the latter to place.
std::vector<std::vector<std::optional<Placement>>> seeds_by_value(const Graph& graph, const Strategy& strategy,
                                                                  bool backward) {
  const size_t axes = strategy.mesh.axes().size();
  std::map<std::string, ValueId> by_name;
  for (size_t v = 0; v < graph.values().size(); ++v) by_name.emplace(graph.values()[v].name, static_cast<ValueId>(v));
  std::vector<std::vector<std::optional<Placement>>> seeds(graph.values().size(),
                                                           std::vector<std::optional<Placement>>(axes));
  for (const PlacementSeed& seed : strategy.seeds) {
    auto it = by_name.find(seed.value);
    const bool gradient = seed.value.size() > 5 && seed.value.compare(seed.value.size() - 5, 5, ".grad") == 0;
    if (it == by_name.end() && gradient && !backward) continue;
    if (it == by_name.end())
      fail("strategy: a seed places '{}' along '{}', but the model has no input, parameter or value of that name",
           seed.value, seed.axis);
    // The executor feeds each rank its rows along the data axis only.
    if (graph.value(it->second).kind == Value::Kind::input && seed.axis != strategy.data_axis &&
        strategy.mesh.size(seed.axis) > 1 && seed.placement != Placement::B())
      fail("strategy: the batch input '{}' is placed {} along '{}'; batch inputs are split only along the data axis "
           "'{}' (seed it there, or place it B along '{}')",
           seed.value, seed.placement.str(), seed.axis, strategy.data_axis, seed.axis);
    seeds[static_cast<size_t>(it->second)][static_cast<size_t>(strategy.mesh.axis(seed.axis))] = seed.placement;
  }
  return seeds;
}

// Training: backward added to `graph`; every parameter with its gradient
// (kNoValue without backward).
std::vector<ParamGrad> with_backward(Graph& graph, const LowerRequest& request) {
  std::vector<ParamGrad> grads;
  if (!request.training) {
    for (ValueId p : graph.params()) grads.push_back({p, kNoValue});
    return grads;
  }
  Gradients g = build_backward(graph, request.loss, graph.params());
  for (ValueId p : graph.params()) grads.push_back({p, g.at(p)});
  return grads;
}

// Under context parallelism the data path sums the loss and every weight
// gradient over the context axis too: each must be a summand there.
void check_context_summands(const Propagation& placement, int context_axis, ValueId loss,
                            const std::vector<ParamGrad>& grads, const Strategy& strategy) {
  const Graph& g = placement.graph;
  auto along = [&](ValueId v) { return placement.of_value[static_cast<size_t>(v)][static_cast<size_t>(context_axis)]; };
  if (!along(loss).is_partial())
    fail("context parallelism: the loss '{}' comes out {} along '{}'; each rank's chunk of the sequence must give "
         "a summand (P) of it",
         g.value(loss).name, along(loss).str(), strategy.context.axis);
  for (const ParamGrad& pg : grads) {
    if (along(pg.param) != Placement::B())
      fail("context parallelism: parameter '{}' is used {} along '{}'; weights are whole there (B)",
           g.value(pg.param).name, along(pg.param).str(), strategy.context.axis);
    if (!along(pg.grad).is_partial())
      fail("context parallelism: the gradient of '{}' comes out {} along '{}'; each chunk of the sequence must give "
           "a summand (P) of it",
           g.value(pg.param).name, along(pg.grad).str(), strategy.context.axis);
  }
}

// The forward graph's ids of `placed` values (the placement graph's). A
// forward value keeps its id in `graph` (backward is appended), but the
// placement graph shifts every value after an inserted reshard.
std::vector<ValueId> forward_ids(const Propagation& placement, const std::vector<ValueId>& placed) {
  std::vector<ValueId> ids;
  for (ValueId v : placed) {
    const auto it = std::find(placement.value_of.begin(), placement.value_of.end(), v);
    PX_CHECK(it != placement.value_of.end(), "placed value {} comes from no forward value", v);
    ids.push_back(static_cast<ValueId>(it - placement.value_of.begin()));
  }
  return ids;
}

// The model axes (tensor and sequence parallelism's): every axis but the
// data, pipeline, context and expert axes.
std::vector<bool> model_axes(const Strategy& strategy) {
  std::vector<bool> model;
  for (const MeshAxis& axis : strategy.mesh.axes())
    model.push_back(axis.name != strategy.data_axis && axis.name != strategy.pipeline.axis &&
                    axis.name != strategy.context.axis && axis.name != kExpertAxis);
  return model;
}

// Placements on every axis, the rule's reshard nodes inserted. Along the
// model axes each gradient is resharded to where its parameter is stored,
// and the loss and `whole_outputs` are made whole (a loss of sequence
// shards is a summand per rank, a vocabulary-split head's logits are
// gathered), and `reported` along every axis; along the data axis (and the context axis, whose gradients
// are summands too: `summed`) the buckets carry them (the transitions).
// `grads`, `loss` and `whole_outputs` come back as the placed graph's ids.
Propagation place(const Graph& graph, const Strategy& strategy, bool backward, std::array<int, 2> summed,
                  std::vector<ParamGrad>& grads, ValueId& loss, std::vector<ValueId>& whole_outputs,
                  std::vector<ValueId>& reported) {
  PlacementRequest placing{.graph = &graph,
                           .mesh = &strategy.mesh,
                           .seeds = seeds_by_value(graph, strategy, backward),
                           .targets = {},
                           .whole_axes = std::vector<bool>(strategy.mesh.axes().size(), false),
                           .expert_axis = strategy.expert_ranks() > 1 ? strategy.mesh.axis(std::string(kExpertAxis))
                                                                      : -1};
  if (strategy.pipeline_ranks() > 1)
    placing.whole_axes[static_cast<size_t>(strategy.mesh.axis(strategy.pipeline.axis))] = true;
  if (strategy.precision == Precision::bf16) placing.bf16_sum_axes = model_axes(strategy);
  for (const ParamGrad& pg : grads) {
    if (pg.grad == kNoValue) continue;
    std::vector<std::optional<Placement>> where = placing.seeds[static_cast<size_t>(pg.param)];
    for (size_t a = 0; a < where.size(); ++a)
      where[a] = static_cast<int>(a) == summed[0] || static_cast<int>(a) == summed[1]
                     ? std::nullopt
                     : std::optional(where[a].value_or(Placement::B()));
    placing.targets.push_back({pg.grad, where});
  }
  std::vector<std::optional<Placement>> whole(strategy.mesh.axes().size());
  for (size_t a = 0; a < whole.size(); ++a)
    if (static_cast<int>(a) != summed[0] && static_cast<int>(a) != summed[1] && !placing.whole_axes[a])
      whole[a] = Placement::B();
  if (loss != kNoValue) placing.targets.push_back({loss, whole});
  for (ValueId v : whole_outputs) placing.targets.push_back({v, whole});
  std::vector<std::optional<Placement>> everywhere(strategy.mesh.axes().size());
  for (size_t a = 0; a < everywhere.size(); ++a)
    if (!placing.whole_axes[a]) everywhere[a] = Placement::B();
  for (ValueId v : reported) placing.targets.push_back({v, everywhere});
  placing.quiet_targets = reported.size();
  Propagation placement = propagate(placing);
  size_t t = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i].param = placement.value_of[static_cast<size_t>(grads[i].param)];
    if (grads[i].grad != kNoValue) grads[i].grad = placement.target_of[t++];
  }
  if (loss != kNoValue) loss = placement.target_of[t++];
  for (ValueId& v : whole_outputs) v = placement.target_of[t++];
  for (ValueId& v : reported) v = placement.target_of[t++];
  return placement;
}

}  // namespace

Strategy with_stage_cuts_of(Strategy strategy, const Program& program) {
  if (strategy.pipeline_ranks() == 1 || !strategy.pipeline.stage_cuts.empty()) return strategy;
  // Local graphs keep the lowered global graph's node order, so a stage
  // start indexes their nodes too.
  const Graph& graph = program.graphs.front();
  const std::vector<int>& starts = program.pipeline.stage_starts;
  for (size_t s = 1; s < starts.size(); ++s)
    strategy.pipeline.stage_cuts.push_back(graph.nodes().at(static_cast<size_t>(starts[s])).name);
  return strategy;
}

namespace {

// Whether the strategy splits activations along a model or context axis
// (sequence or context parallelism): seeds on values that are not
// parameters, or context ranks. There a gradient split along the sequence
// is gathered for its GEMMs; round_shared_gradients_once runs before
// propagation, so its cast would be gathered beside the fp32 value the
// other readers take (twice the collectives): such strategies go without.
bool splits_activations_off_the_data_axis(const Strategy& strategy, const Graph& graph) {
  if (strategy.context_ranks() > 1) return true;
  for (const PlacementSeed& seed : strategy.seeds) {
    if (seed.axis == strategy.data_axis) continue;
    bool parameter = false;
    for (ValueId p : graph.params()) parameter = parameter || graph.value(p).name == seed.value;
    if (!parameter) return true;
  }
  return false;
}

// Whether every seed splits along the data axis: no tensor or sequence
// parallelism, so no linear takes its row-parallel signature (a partial
// output, which linear_bias does not offer) and the bias fusion is sound.
bool seeds_only_on_the_data_axis(const Strategy& strategy) {
  for (const PlacementSeed& seed : strategy.seeds)
    if (seed.axis != strategy.data_axis) return false;
  return true;
}

// The value ids lower() holds, renumbered after a fusion removed nodes.
void follow(const FusedBiases& fused, std::vector<ParamGrad>& grads, ValueId& loss, std::vector<ValueId>& outputs) {
  if (fused.fused == 0) return;
  auto renumbered = [&](ValueId v) { return v == kNoValue ? v : fused.new_id.at(static_cast<size_t>(v)); };
  for (ParamGrad& pg : grads) {
    pg.param = renumbered(pg.param);
    pg.grad = renumbered(pg.grad);
  }
  loss = renumbered(loss);
  for (ValueId& v : outputs) v = renumbered(v);
}

}  // namespace

Program lower(const LowerRequest& request, const Strategy& strategy, int rank) {
  PX_CHECK(request.forward != nullptr, "lower: no graph");
  PX_CHECK(request.loss != kNoValue || !request.training, "lower: training needs a loss");
  validate(strategy);
  if (rank < 0 || rank >= strategy.mesh.ranks())
    fail("lowering: rank {} is outside mesh {} of {} ranks", rank, strategy.mesh.str(), strategy.mesh.ranks());
  Graph graph = *request.forward;  // backward is added to a copy
  set_precision(graph, strategy.precision);  // the run's precision is the strategy's
  if (strategy.context_ranks() > 1 && strategy.context.method == ContextMethod::ring)
    ring_attention(graph, strategy.context_ranks(), strategy.context.balance);
  if (strategy.expert_ranks() > 1) route_to_experts(graph);
  int forward_nodes = static_cast<int>(graph.nodes().size());
  std::vector<ParamGrad> grads = with_backward(graph, request);
  forward_nodes += store_gemm_operands_in_bf16(graph);  // its casts follow forward nodes
  ValueId loss = request.loss;
  std::vector<ValueId> request_outputs = request.outputs;  // then the shard outputs, then the reported
  request_outputs.insert(request_outputs.end(), request.shard_outputs.begin(), request.shard_outputs.end());
  request_outputs.insert(request_outputs.end(), request.reported.begin(), request.reported.end());
  if (seeds_only_on_the_data_axis(strategy)) {
    const FusedBiases fused = fuse_bias_into_gemms(graph);
    forward_nodes -= fused.fused;
    follow(fused, grads, loss, request_outputs);
  }
  if (!splits_activations_off_the_data_axis(strategy, graph)) {
    round_shared_gradients_once(graph);  // backward casts
    // Not across pipeline stages: the sum goes with its linear's stage, gelu_grad with gelu's, and a cut may part them.
    if (strategy.pipeline_ranks() == 1) follow(fuse_bias_gradients_into_gelu_grad(graph), grads, loss, request_outputs);
  }
  const int axis = strategy.mesh.axis(strategy.data_axis);
  const int context_axis = strategy.context_ranks() > 1 ? strategy.mesh.axis(strategy.context.axis) : -1;
  const int joined = joined_axis(strategy);
  const int joined_size = joined >= 0 ? strategy.mesh.axes()[static_cast<size_t>(joined)].size : 1;
  const std::vector<int> coords = strategy.mesh.coords(rank);

  const size_t whole_count = request.outputs.size(), shard_end = whole_count + request.shard_outputs.size();
  std::vector<ValueId> outputs(request_outputs.begin(), request_outputs.begin() + static_cast<ptrdiff_t>(whole_count));
  std::vector<ValueId> reported(request_outputs.begin() + static_cast<ptrdiff_t>(shard_end), request_outputs.end());
  const Propagation placement =
      place(graph, strategy, request.training, {axis, context_axis}, grads, loss, outputs, reported);
  for (size_t i = whole_count; i < shard_end; ++i)
    outputs.push_back(placement.value_of[static_cast<size_t>(request_outputs[i])]);
  outputs.insert(outputs.end(), reported.begin(), reported.end());
  const int local_forward_nodes = forward_nodes < static_cast<int>(placement.node_of.size())
                                      ? placement.node_of[static_cast<size_t>(forward_nodes)]
                                      : static_cast<int>(placement.graph.nodes().size());

  passes::Context context{.graph = placement.graph,
                          .strategy = strategy,
                          .coords = coords,
                          .data_rank = joined_coordinate(strategy.mesh, coords, axis, joined),
                          .data_size = strategy.data_ranks() * joined_size,
                          .row_rank = strategy.row_rank(coords),
                          .row_ranks = strategy.row_ranks(),
                          .data_axis = axis,
                          .context_axis = context_axis,
                          .joined_axis = joined,
                          .expert_axis = strategy.expert_ranks() > 1 ? strategy.mesh.axis(std::string(kExpertAxis)) : -1,
                          .zero_stage = strategy.data_ranks() * joined_size > 1 ? strategy.zero_stage : 0,
                          .forward_nodes = local_forward_nodes,
                          .loss = loss,
                          .grads = grads,
                          .placement = placement,
                          .transitions = {}};
  Strategy effective = strategy;
  effective.zero_stage = context.zero_stage;
  std::vector<ParamGrad> with_gradients;
  for (const ParamGrad& pg : grads)
    if (pg.grad != kNoValue) with_gradients.push_back(pg);
  context.transitions = transitions(placement.graph, placement, axis, loss, with_gradients, effective);
  if (context_axis >= 0) check_context_summands(placement, context_axis, loss, with_gradients, strategy);

  Program program;
  program.strategy = strategy;
  program.rank = rank;
  program.coords = coords;
  program.loss = loss;
  program.outputs = outputs;
  program.training = request.training;
  program.collective = request.collective;
  context.work = passes::plan_work(context, program);
  passes::recompute(context, context.work);
  passes::localize(context, program);
  program.batch_feeds = forward_ids(placement, program.batch_inputs);
  passes::buckets(context, program);
  passes::schedule(context, program);
  passes::optimizer(context, program);
  passes::defer_updates(program);
  passes::frees(program);
  passes::back_pressure(program, request.bucket_buffers);
  passes::facts(context, program, request.menus);
  return program;
}

Program lower_single(const Graph& forward, ValueId loss, const std::vector<ValueId>& outputs,
                     const std::vector<std::string>& batch_inputs, bool training, Precision precision) {
  Strategy strategy = data_parallel(1, batch_inputs);
  strategy.precision = precision;
  strategy.lowering.updates = false;
  strategy.lowering.global_norm = training;  // the worker's gradients, clipped by the Program
  return lower({.forward = &forward, .loss = loss, .outputs = outputs, .training = training}, strategy, 0);
}

}  // namespace px::parallel
