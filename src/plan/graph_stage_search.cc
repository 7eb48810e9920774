// The stage search on a graph without repeated blocks (plan/stage_search.h
// search_graph_stages): an imported ONNX graph is fixed as exported, so no
// one- and two-block copies can be probed. Each layout of the same space
// (plan/stage_layouts.h) is composed with its stages cut by cost at the
// graph's narrowest node boundaries (parallel/lower/stages.h, the cut
// `--pp` without `--stage-cuts` makes), named as `--stage-cuts` names
// them, and replayed on its real Programs
// (plan/search.h evaluate): such graphs are small, so direct evaluation is
// affordable, and every figure is the simulator's.
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "parallel/compose.h"
#include "parallel/lower/stages.h"
#include "plan/candidates.h"
#include "plan/stage_layouts.h"
#include "plan/stage_search.h"

namespace px::plan {
namespace {

using parallel::Recompute;

// Per number of stages (a divisor of `ranks`) that the graph's narrowest
// cuts allow: the nodes that start stages 1, 2, ... when cut by cost, by
// name. A strategy names them so that the run cuts where the plan was
// simulated: the cut a run makes itself moves when it stores values in
// bf16 (their copies change which boundaries are narrowest). Empty names
// when one does not find its node again (a name another node's begins
// with): the run then cuts by cost itself.
std::map<int, std::vector<std::string>> stage_cuts(const Graph& graph, int ranks) {
  const int forward = static_cast<int>(graph.nodes().size());
  std::map<int, std::vector<std::string>> cuts{{1, {}}};
  for (int stages : divisors(ranks)) {
    if (stages == 1) continue;
    std::vector<int> starts;
    try {
      starts = parallel::balanced_stage_starts(graph, forward, stages);
    } catch (const Error&) {
      break;  // fewer cut places than stages - 1; more stages need more
    }
    std::vector<std::string> names;
    for (size_t s = 1; s < starts.size(); ++s) names.push_back(graph.nodes()[static_cast<size_t>(starts[s])].name);
    try {
      if (parallel::stage_starts_at(graph, forward, names) != starts) names.clear();
    } catch (const Error&) {
      names.clear();
    }
    cuts[stages] = std::move(names);
  }
  return cuts;
}

// What recomputation can rerun: selective reruns attention cores; full
// reruns "h.<i>" blocks, which such a graph has none of.
bool recomputable(const Graph& graph, Recompute recompute) {
  if (recompute == Recompute::none) return true;
  if (recompute == Recompute::full) return false;
  for (const Node& n : graph.nodes())
    if (n.op() == "attention") return true;
  return false;
}

}  // namespace

std::vector<Candidate> search_graph_stages(StageSearch& search, const Deadline& deadline) {
  const PlanRequest& request = *search.request;
  const nn::Model& model = *search.model;
  const std::map<int, std::vector<std::string>> cuts = stage_cuts(model.graph, request.ranks);
  std::vector<StageLayout> layouts;
  for (const StageLayout& l : stage_layouts(request, cuts.rbegin()->first))
    if (recomputable(model.graph, l.recompute)) layouts.push_back(l);
  search.considered = static_cast<int>(layouts.size());
  // A fixed shuffled order, as the block search's: a search the deadline
  // cuts short has sampled every mesh and micro-batch count.
  std::vector<size_t> order(layouts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  Rng rng(0x5ca1e);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  std::vector<Candidate> out;
  for (size_t index : order) {
    if (deadline.passed()) {
      search.cut = true;
      break;
    }
    const StageLayout& l = layouts[index];
    parallel::Strategy strategy;
    try {
      strategy = parallel::compose({.zero_stage = l.zero,
                                    .tensor_parallel = l.tp,
                                    .sequence_parallel = l.sp,
                                    .pipeline_parallel = l.stages,
                                    .pipeline = {.schedule = l.kind, .stage_cuts = cuts.at(l.stages)},
                                    .recompute = l.recompute,
                                    .micro_batches = l.micro_batches,
                                    .precision = request.space.precision},
                                   {.graph = &model.graph, .batch_inputs = request.batch_inputs, .ranks = request.ranks});
    } catch (const Error&) {
      --search.considered;  // not a strategy for this graph (no layer tensor parallelism splits)
      continue;
    }
    try {
      out.push_back(evaluate(request, model, strategy, *search.estimator, &deadline));
    } catch (const DeadlinePassed&) {
      search.cut = true;
      break;
    }
  }
  return out;
}

}  // namespace px::plan
