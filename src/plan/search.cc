#include "plan/search.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "parallel/strategy.h"
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
  if (rejected.empty()) fail("plan: the search considered no strategy (is the budget too small?)");
  fail("plan: no strategy fits; the closest, {}, was rejected: {}", rejected.front().description,
       rejected.front().rejected);
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
                   const CostEstimator& estimator) {
  Candidate c{.strategy = strategy, .description = describe(strategy)};
  std::vector<parallel::Program> programs;
  try {
    programs = lower_representatives({.forward = &model.graph, .loss = model.loss}, strategy);
  } catch (const Error& e) {
    c.rejected = fmt::format("does not lower: {}", e.what());
    return c;
  }
  const SimulationRequest replay{.programs = &programs,
                                 .cluster = request.cluster,
                                 .estimator = &estimator,
                                 .overlap = request.overlap,
                                 .optimizer_slots = request.optimizer_slots,
                                 .compute = request.compute};
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
  const auto start = std::chrono::steady_clock::now();
  SearchSpace space = request.space;
  space.ranks = request.ranks;
  space.batch = request.batch;
  space.batch_inputs = request.batch_inputs;
  const nn::Model model = request.build(request.batch, 0);
  const std::unique_ptr<CostEstimator> own = request.estimator ? nullptr : estimator_for(request);
  const CostEstimator* estimator = request.estimator ? request.estimator : own.get();
  std::string method = request.method;
  // The grid, for the methods that walk it (or choose by its size).
  std::vector<parallel::Strategy> grid_candidates;
  if (method == "auto" || method == "grid") {
    grid_candidates = grid(model.graph, space);
    if (grid_candidates.empty()) fail("plan: no strategy of the grid validates for {} ranks", request.ranks);
  }

  PlanResult result;
  result.considered = static_cast<int>(grid_candidates.size());
  std::vector<Candidate> all;
  if (method == "auto" && has_blocks(model.graph) && grid_candidates.size() > 1000) method = "alpa";
  if (method == "auto") {
    // The grid when it fits the budget: time one candidate to tell.
    const auto probe_start = std::chrono::steady_clock::now();
    all.push_back(evaluate(request, model, grid_candidates.front(), *estimator));
    const double each = seconds_since(probe_start);
    const bool grid_fits = each * static_cast<double>(grid_candidates.size()) < 0.8 * request.budget_seconds;
    method = grid_fits || !has_blocks(model.graph) ? "grid" : "alpa";
    if (method == "alpa") all.clear();
  }
  if (method == "grid") {
    for (size_t i = all.size(); i < grid_candidates.size(); ++i) {
      if (seconds_since(start) > request.budget_seconds) {
        result.budget_exhausted = true;
        break;
      }
      all.push_back(evaluate(request, model, grid_candidates[i], *estimator));
    }
    // auto on models of fully-connected chains: their layer-wise placements too.
    if (request.method == "auto" && request.space.tensor && !has_blocks(model.graph)) {
      LayerSearch search{.request = &request, .estimator = estimator, .model = &model};
      for (Candidate& c : search_layers(search, start)) all.push_back(std::move(c));
      result.considered += search.considered;
      method = "grid+layerwise";
    }
  } else if (method == "layerwise") {
    LayerSearch search{.request = &request, .estimator = estimator, .model = &model};
    all = search_layers(search, start);
    if (all.empty())
      fail("plan: --method layerwise places fully-connected layers fc1, fc2, ... one by one; this model has none");
    // Beside plain data parallelism, the baseline any placement must beat.
    parallel::Strategy dp = parallel::data_parallel(request.ranks, request.batch_inputs);
    all.push_back(evaluate(request, model, dp, *estimator));
    result.considered = search.considered + 1;
  } else if (method == "mcmc") {
    McmcSearch search{.request = &request, .estimator = estimator, .model = &model, .delta = request.mcmc_delta};
    all = search_mcmc(search, start);
    all.push_back(evaluate(request, model, parallel::data_parallel(request.ranks, request.batch_inputs), *estimator));
    result.considered = search.proposals + 1;
    result.proposals = search.proposals;
    result.proposals_per_second = search.proposals_per_second();
  } else if (method == "alpa") {
    if (!has_blocks(model.graph))
      fail("plan: --method alpa cuts models of repeated blocks (h.0, h.1, ...) into stages; this model has none");
    StageSearch search{.request = &request, .estimator = estimator, .model = &model};
    all = search_stages(search, start);
    result.considered = search.considered;
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
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace px::plan
