#include "plan/search.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "parallel/compose.h"
#include "plan/simulate.h"
#include "plan/layer_search.h"
#include "plan/mcmc_search.h"
#include "plan/stage_search.h"

namespace px::plan {
namespace {

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1 << 30)); }

// Blocks "h.<i>" of a model (the alpa search needs them).
bool has_blocks(const Graph& graph) {
  for (const Node& n : graph.nodes())
    if (n.name.rfind("h.1.", 0) == 0) return true;
  return false;
}

}  // namespace

int complexity(const parallel::Strategy& s) {
  int score = s.zero_stage + (s.pipeline_ranks() - 1);
  for (int m = s.micro_batches; m > 1; m /= 2) ++score;
  if (s.mesh.ranks() > s.data_ranks() * s.pipeline_ranks()) ++score;
  for (const parallel::PlacementSeed& seed : s.seeds) score += seed.value == "embed";  // sequence parallelism
  if (s.lowering.recompute != parallel::Recompute::none) ++score;
  return score;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

const Candidate& PlanResult::best() const {
  if (!ranked.empty()) {
    const Candidate* chosen = &ranked.front();
    for (const Candidate& c : ranked) {
      if (c.step_seconds > ranked.front().step_seconds * (1 + kTieTolerance)) break;
      if (c.description.empty() || c.strategy.mesh.ranks() <= 0) continue;
      if (complexity(c.strategy) < complexity(chosen->strategy)) chosen = &c;
    }
    return *chosen;
  }
  if (rejected.empty() && budget_exhausted)
    fail("plan: the search estimated no strategy within the {:g} s budget (give a larger --budget-s)", budget_seconds);
  if (rejected.empty()) fail("plan: no strategy of the search space validates for these ranks");
  const std::string cut = budget_exhausted ? fmt::format(" (the search was cut at the {:g} s budget after estimating {} "
                                                         "of {} candidates; a larger --budget-s covers more)",
                                                         budget_seconds, evaluated, considered)
                                           : "";
  fail("plan: no strategy fits; the closest, {}, was rejected: {}{}", rejected.front().description,
       rejected.front().rejected, cut);
}

std::unique_ptr<CostEstimator> estimator_for(const PlanRequest& request) {
  ProfiledEstimator::Options local = request.local;
  local.ranks = request.ranks;
  return make_estimator(*request.cluster, request.compute, local);
}

std::string memory_verdict(const ClusterSpec& cluster, int ranks, double peak) {
  if (cluster.devices_share_memory) {
    const int on_node = std::min(ranks, cluster.devices_per_node);
    const double need = peak * on_node;
    if (need <= cluster.device.memory_bytes) return "";
    return fmt::format("needs {} on a node ({} ranks x {}), the node has {}", gib(need), on_node, gib(peak),
                       gib(cluster.device.memory_bytes));
  }
  if (peak <= cluster.device.memory_bytes) return "";
  return fmt::format("needs {} a device, the device has {}", gib(peak), gib(cluster.device.memory_bytes));
}

Candidate evaluate(const PlanRequest& request, const nn::Model& model, const parallel::Strategy& strategy,
                   const CostEstimator& estimator, const Deadline* deadline) {
  Candidate c{.strategy = strategy, .description = describe(strategy)};
  std::vector<parallel::Program> programs;
  try {
    programs = lower_representatives({.forward = &model.graph, .loss = model.loss}, strategy, deadline);
  } catch (const Error& e) {
    c.rejected = fmt::format("does not lower: {}", e.what());
    return c;
  }
  const SimulationRequest replay{.programs = &programs,
                                 .cluster = request.cluster,
                                 .estimator = &estimator,
                                 .overlap = request.overlap,
                                 .optimizer_slots = request.optimizer_slots,
                                 .compute = request.compute,
                                 .deadline = deadline};
  // The local spec's ranks share cores: as many slow each other as compute at once.
  const Simulation sim = request.cluster->profile && !request.estimator
                             ? simulate_sharing_cores(replay, request.local)
                             : simulate(replay);
  c.step_seconds = sim.step_seconds;
  c.peak_bytes = *std::max_element(sim.peak_bytes.begin(), sim.peak_bytes.end());
  c.utilization = sim.flops / (sim.step_seconds * strategy.mesh.ranks() * request.cluster->device.flops(request.compute));
  c.simulated = true;
  c.rejected = memory_verdict(*request.cluster, strategy.mesh.ranks(), c.peak_bytes);
  return c;
}

PlanResult plan(const PlanRequest& request) {
  PX_CHECK(request.build && request.cluster, "plan: incomplete request");
  if (request.ranks > request.cluster->devices())
    fail("plan: {} ranks, cluster '{}' has {} devices ({} nodes x {})", request.ranks, request.cluster->name,
         request.cluster->devices(), request.cluster->nodes, request.cluster->devices_per_node);
  if (request.budget_seconds <= 0) fail("plan: --budget-s {} must be > 0", request.budget_seconds);
  const Deadline deadline{.seconds = request.budget_seconds};
  SearchSpace space = request.space;
  space.ranks = request.ranks;
  space.batch = request.batch;
  space.batch_inputs = request.batch_inputs;
  const nn::Model model = request.build(request.batch, 0);
  const std::unique_ptr<CostEstimator> own = request.estimator ? nullptr : estimator_for(request);
  const CostEstimator* estimator = request.estimator ? request.estimator : own.get();
  std::string method = request.method;
  // The grid's points, for the methods that walk it (or choose by its size).
  std::vector<GridPoint> points;
  if (method == "auto" || method == "grid") {
    points = grid_points(model.graph, space);
    if (points.empty()) fail("plan: the grid has no strategy for {} ranks", request.ranks);
  }

  PlanResult result;
  result.budget_seconds = request.budget_seconds;
  result.considered = static_cast<int>(points.size());
  std::vector<Candidate> all;
  // The grid from point `next` on, each point's Strategy built when it is reached (a point that does not
  // validate leaves the space), until the deadline.
  size_t next = 0;
  auto walk_grid = [&](size_t until) {
    for (; next < until; ++next) {
      if (deadline.passed()) return false;
      std::optional<parallel::Strategy> strategy = grid_strategy(model.graph, space, points[next]);
      if (!strategy) {
        --result.considered;
        continue;
      }
      try {
        all.push_back(evaluate(request, model, *strategy, *estimator, &deadline));
      } catch (const DeadlinePassed&) {
        return false;
      }
    }
    return true;
  };
  // Beside the layer-wise and MCMC placements, plain data parallelism: the
  // baseline any placement must beat (left out when the budget is spent).
  auto add_data_parallel_baseline = [&] {
    try {
      all.push_back(evaluate(request, model, parallel::data_parallel(request.ranks, request.batch_inputs), *estimator,
                             &deadline));
    } catch (const DeadlinePassed&) {
      result.budget_exhausted = true;
    }
  };
  if (method == "auto" && has_blocks(model.graph) && points.size() > 1000) method = "alpa";
  if (method == "auto") {
    // The grid when it fits the budget: time its first candidate to tell.
    const auto probe_start = std::chrono::steady_clock::now();
    while (all.empty() && next < points.size() && walk_grid(next + 1)) {}
    const double each = seconds_since(probe_start);
    const bool grid_fits = each * static_cast<double>(points.size()) < 0.8 * request.budget_seconds;
    method = grid_fits || !has_blocks(model.graph) ? "grid" : "alpa";
    if (method == "alpa") all.clear();
  }
  if (method == "grid") {
    result.budget_exhausted = !walk_grid(points.size());
    // auto on models of fully-connected chains: their layer-wise placements too.
    if (request.method == "auto" && request.space.tensor && !has_blocks(model.graph)) {
      LayerSearch search{.request = &request, .estimator = estimator, .model = &model};
      for (Candidate& c : search_layers(search, deadline)) all.push_back(std::move(c));
      result.considered += search.considered;
      result.budget_exhausted = result.budget_exhausted || search.cut;
      method = "grid+layerwise";
    }
  } else if (method == "layerwise") {
    LayerSearch search{.request = &request, .estimator = estimator, .model = &model};
    all = search_layers(search, deadline);
    if (all.empty() && !search.cut)
      fail("plan: --method layerwise places fully-connected layers fc1, fc2, ... one by one; this model has none");
    result.considered = search.considered + 1;
    result.budget_exhausted = search.cut;
    add_data_parallel_baseline();
  } else if (method == "mcmc") {
    McmcSearch search{.request = &request, .estimator = estimator, .model = &model, .delta = request.mcmc_delta};
    all = search_mcmc(search, deadline);
    result.considered = search.proposals + 1;
    result.proposals = search.proposals;
    result.proposals_per_second = search.proposals_per_second();
    result.budget_exhausted = search.cut;
    add_data_parallel_baseline();
  } else if (method == "alpa") {
    if (!has_blocks(model.graph))
      fail("plan: --method alpa cuts models of repeated blocks (h.0, h.1, ...) into stages; this model has none");
    StageSearch search{.request = &request, .estimator = estimator, .model = &model};
    all = search_stages(search, deadline);
    result.considered = search.considered;
    result.budget_exhausted = search.cut;
  } else {
    fail("plan: --method '{}' is unknown; expected auto, grid, layerwise, mcmc or alpa", method);
  }
  result.method = method;
  result.evaluated = static_cast<int>(all.size());
  for (Candidate& c : all) (c.rejected.empty() ? result.ranked : result.rejected).push_back(std::move(c));
  // Fastest first; a simulated figure before an estimate of the same time.
  auto faster = [](const Candidate& a, const Candidate& b) {
    if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
    return a.simulated > b.simulated;
  };
  std::stable_sort(result.ranked.begin(), result.ranked.end(), faster);
  // The rejected closest to fitting first: by memory, then time.
  std::stable_sort(result.rejected.begin(), result.rejected.end(), [](const Candidate& a, const Candidate& b) {
    if ((a.peak_bytes > 0) != (b.peak_bytes > 0)) return a.peak_bytes > 0;
    return a.peak_bytes < b.peak_bytes;
  });
  result.seconds = deadline.elapsed();
  return result;
}

}  // namespace px::plan
