#include "plan/search.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/error.h"
#include "parallel/compose.h"
#include "parallel/split_units.h"
#include "plan/layer_search.h"
#include "plan/mcmc_search.h"
#include "plan/simulate.h"
#include "plan/speed_split.h"
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
  if (!s.row_shares.empty()) ++score;  // uneven rows: a near-tie keeps the even split
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
  return make_estimator(*request.cluster, local);
}

std::string memory_verdict(const ClusterSpec& cluster, int ranks, double peak) {
  // A heterogeneous cluster's plan must fit its smallest node.
  double memory = cluster.device.memory_bytes;
  for (const DeviceSpec& d : cluster.node_devices) memory = std::min(memory, d.memory_bytes);
  if (cluster.devices_share_memory) {
    const int on_node = std::min(ranks, cluster.devices_per_node);
    const double need = peak * on_node;
    if (need <= memory) return "";
    return fmt::format("needs {} on a node ({} ranks x {}), the node has {}", gib(need), on_node, gib(peak),
                       gib(memory));
  }
  if (peak <= memory) return "";
  return fmt::format("needs {} a device, the device has {}", gib(peak), gib(memory));
}

Candidate evaluate(const PlanRequest& request, const nn::Model& model, const parallel::Strategy& strategy,
                   const CostEstimator& estimator, const Deadline* deadline) {
  Candidate c{.strategy = strategy, .description = describe(strategy)};
  std::vector<parallel::Program> programs;
  try {
    programs = lower_representatives({.forward = &model.graph, .loss = model.loss}, strategy, deadline,
                                     request.cluster->heterogeneous());
  } catch (const Error& e) {
    c.rejected = fmt::format("does not lower: {}", e.what());
    return c;
  }
  const SimulationRequest replay{.programs = &programs,
                                 .cluster = request.cluster,
                                 .estimator = &estimator,
                                 .execution = {.overlap = request.overlap},
                                 .optimizer_slots = request.optimizer_slots,
                                 .deadline = deadline};
  // The local spec's ranks share cores: as many slow each other as compute at once.
  const Simulation sim = request.cluster->profile && !request.estimator
                             ? simulate_sharing_cores(replay, request.local)
                             : simulate(replay);
  c.step_seconds = sim.step_seconds;
  c.peak_bytes = *std::max_element(sim.peak_bytes.begin(), sim.peak_bytes.end());
  // Against the bf16 peak where the strategy runs its GEMMs in bf16.
  const DType peak = strategy.precision == Precision::bf16 ? DType::bf16 : DType::f32;
  c.utilization = sim.flops / (sim.step_seconds * strategy.mesh.ranks() * request.cluster->device.flops(peak));
  c.simulated = true;
  c.rejected = memory_verdict(*request.cluster, strategy.mesh.ranks(), c.peak_bytes);
  return c;
}

namespace {

// One plan() call's search: the grid walked point by point, or one of the
// other methods, every candidate into `all` until the deadline.
class Planner {
 public:
  Planner(const PlanRequest& request, const Deadline& deadline)
      : request_(request), deadline_(deadline), model_(request.build(request.batch, 0)),
        own_(request.estimator ? nullptr : estimator_for(request)),
        estimator_(request.estimator ? request.estimator : own_.get()) {
    space_ = request.space;
    space_.ranks = request.ranks;
    space_.batch = request.batch;
    space_.batch_inputs = request.batch_inputs;
    result_.budget_seconds = request.budget_seconds;
  }

  PlanResult run() {
    std::string method = request_.method;
    // The grid's points, for the methods that walk it (or choose by its size).
    if (method == "auto" || method == "grid") {
      points_ = grid_points(model_.graph, space_);
      if (points_.empty()) fail("plan: the grid has no strategy for {} ranks", request_.ranks);
    }
    result_.considered = static_cast<int>(points_.size());
    if (method == "auto") method = choose();
    if (method == "grid") method = grid();
    else if (method == "layerwise") layerwise();
    else if (method == "mcmc") mcmc();
    else if (method == "alpa") alpa();
    else fail("plan: --method '{}' is unknown; expected auto, grid, layerwise, mcmc or alpa", method);
    result_.method = method;
    rank();
    result_.seconds = deadline_.elapsed();
    return std::move(result_);
  }

 private:
  // auto: alpa on large grids of models of blocks; else the grid when it
  // fits the budget (its first candidate timed to tell). A grid with
  // expert parallelism in it is walked as far as the budget goes: alpa's
  // per-block costs have no routed exchanges, the grid's Programs do.
  std::string choose() {
    const bool experts = std::any_of(points_.begin(), points_.end(), [](const GridPoint& p) { return p.ep > 1; });
    if (experts) return "grid";
    if (has_blocks(model_.graph) && points_.size() > 1000) return "alpa";
    const auto probe_start = std::chrono::steady_clock::now();
    while (all_.empty() && next_ < points_.size() && walk_grid(next_ + 1)) {}
    const double each = seconds_since(probe_start);
    const bool grid_fits = each * static_cast<double>(points_.size()) < 0.8 * request_.budget_seconds;
    if (grid_fits || !has_blocks(model_.graph)) return "grid";
    all_.clear();
    return "alpa";
  }

  // The grid from point `next_` on, each point's Strategy built when it is
  // reached (a point that does not validate leaves the space), until the
  // deadline: false once it passed.
  bool walk_grid(size_t until) {
    for (; next_ < until; ++next_) {
      if (deadline_.passed()) return false;
      std::optional<parallel::Strategy> strategy = grid_strategy(model_.graph, space_, points_[next_]);
      if (!strategy) {
        --result_.considered;
        continue;
      }
      try {
        all_.push_back(evaluate(request_, model_, *strategy, *estimator_, &deadline_));
        // On ranks of different speeds, the same point split by speed too.
        if (std::optional<parallel::Strategy> by_speed = split_by_speed(*strategy)) {
          ++result_.considered;
          all_.push_back(evaluate(request_, model_, *by_speed, *estimator_, &deadline_));
        }
      } catch (const DeadlinePassed&) {
        return false;
      }
    }
    return true;
  }

  // `strategy` with its work split by the ranks' speeds (plan/speed_split.h)
  // where the cluster's ranks differ: the data ranks' rows in proportion
  // (when every one keeps at least a row of the batch), and the pipeline
  // cut so that a slower stage holds less (when the strategy names no
  // cuts). nullopt when neither applies.
  std::optional<parallel::Strategy> split_by_speed(const parallel::Strategy& strategy) const {
    parallel::Strategy by_speed = strategy;
    bool split = false;
    std::vector<int64_t> shares = speed_shares(*request_.cluster, strategy);
    bool every_rank_has_rows = !shares.empty();
    for (int r = 0; every_rank_has_rows && r < strategy.data_ranks(); ++r)
      every_rank_has_rows = parallel::shard_rows(request_.batch, r, strategy.data_ranks(), shares).size() > 0;
    if (every_rank_has_rows) {
      by_speed.row_shares = std::move(shares);
      split = true;
    }
    if (strategy.pipeline.stage_cuts.empty())
      if (std::optional<std::vector<std::string>> cuts = stage_cuts_by_speed(model_.graph, *request_.cluster, strategy)) {
        by_speed.pipeline.stage_cuts = std::move(*cuts);
        split = true;
      }
    if (!split) return std::nullopt;
    return by_speed;
  }

  std::string grid() {
    result_.budget_exhausted = !walk_grid(points_.size());
    // auto on models of fully-connected chains: their layer-wise placements too.
    if (request_.method != "auto" || !request_.space.tensor || has_blocks(model_.graph)) return "grid";
    LayerSearch search{.request = &request_, .estimator = estimator_, .model = &model_};
    for (Candidate& c : search_layers(search, deadline_)) all_.push_back(std::move(c));
    result_.considered += search.considered;
    result_.budget_exhausted = result_.budget_exhausted || search.cut;
    return "grid+layerwise";
  }

  void layerwise() {
    if (parallel::split_units(model_.graph).empty())
      fail("plan: --method layerwise places the layers tensor parallelism splits (fully-connected layers, "
           "transformer blocks' attention and MLP) one by one; this model has none");
    LayerSearch search{.request = &request_, .estimator = estimator_, .model = &model_};
    all_ = search_layers(search, deadline_);
    result_.considered = search.considered + 1;
    result_.budget_exhausted = search.cut;
    add_data_parallel_baseline();
  }

  void mcmc() {
    McmcSearch search{.request = &request_, .estimator = estimator_, .model = &model_, .delta = request_.mcmc_delta};
    all_ = search_mcmc(search, deadline_);
    result_.considered = search.proposals + 1;
    result_.proposals = search.proposals;
    result_.proposals_per_second = search.proposals_per_second();
    result_.budget_exhausted = search.cut;
    add_data_parallel_baseline();
  }

  void alpa() {
    StageSearch search{.request = &request_, .estimator = estimator_, .model = &model_};
    all_ = search_stages(search, deadline_);
    result_.considered = search.considered;
    result_.budget_exhausted = search.cut;
  }

  // Beside the layer-wise and MCMC placements, plain data parallelism: the
  // baseline any placement must beat (left out when the budget is spent).
  void add_data_parallel_baseline() {
    try {
      parallel::Strategy baseline = parallel::data_parallel(request_.ranks, request_.batch_inputs);
      baseline.precision = request_.space.precision;
      all_.push_back(evaluate(request_, model_, baseline, *estimator_, &deadline_));
    } catch (const DeadlinePassed&) {
      result_.budget_exhausted = true;
    }
  }

  // Fastest first, a simulated figure before an estimate of the same time;
  // the rejected closest to fitting first: by memory, then time.
  void rank() {
    result_.evaluated = static_cast<int>(all_.size());
    for (Candidate& c : all_) (c.rejected.empty() ? result_.ranked : result_.rejected).push_back(std::move(c));
    std::stable_sort(result_.ranked.begin(), result_.ranked.end(), [](const Candidate& a, const Candidate& b) {
      if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
      return a.simulated > b.simulated;
    });
    std::stable_sort(result_.rejected.begin(), result_.rejected.end(), [](const Candidate& a, const Candidate& b) {
      if ((a.peak_bytes > 0) != (b.peak_bytes > 0)) return a.peak_bytes > 0;
      return a.peak_bytes < b.peak_bytes;
    });
  }

  const PlanRequest& request_;
  const Deadline& deadline_;
  const nn::Model model_;
  const std::unique_ptr<CostEstimator> own_;
  const CostEstimator* estimator_;
  SearchSpace space_;
  std::vector<GridPoint> points_;
  size_t next_ = 0;  // the grid's next point to walk
  std::vector<Candidate> all_;
  PlanResult result_;
};

}  // namespace

PlanResult plan(const PlanRequest& request) {
  PX_CHECK(request.build && request.cluster, "plan: incomplete request");
  if (request.ranks > request.cluster->devices())
    fail("plan: {} ranks, cluster '{}' has {} devices ({} nodes x {})", request.ranks, request.cluster->name,
         request.cluster->devices(), request.cluster->nodes, request.cluster->devices_per_node);
  if (request.budget_seconds <= 0) fail("plan: --budget-s {} must be > 0", request.budget_seconds);
  const Deadline deadline{.seconds = request.budget_seconds};
  return Planner(request, deadline).run();
}

}  // namespace px::plan
