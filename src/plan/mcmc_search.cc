#include "plan/mcmc_search.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "plan/candidates.h"
#include "parallel/compose.h"
#include "plan/layer_placement.h"
#include "plan/simulate.h"
#include "plan/unit_table.h"

namespace px::plan {
namespace {

// A unit's tasks under one layout, timed by the estimator.
struct UnitTimes {
  double forward = 0, backward = 0;  // computes, and a split pair's allreduce each way
  double sync = 0;                   // its gradient's reduction along dp
};

class Chain {
 public:
  Chain(const PlanRequest& request, const CostEstimator& estimator, const UnitTable& table, int dp, int tp)
      : estimator_(estimator), table_(table), graph_(table.graph()), dp_(dp), tp_(tp) {
    const ClusterSpec& cluster = *request.cluster;
    tp_link_ = cluster.link_between(0, tp - 1);
    dp_link_ = cluster.link_between(0, (dp - 1) * tp);
    tp_per_node_ = cluster.fewest_ranks_on_a_node(tp, 1);
    dp_per_node_ = cluster.fewest_ranks_on_a_node(dp, tp);
  }

  const std::vector<LayerUnit>& units() const { return table_.units; }

  UnitTimes time_unit(size_t u, LayerPlacement l) const {
    const LayerUnit& unit = table_.units[u];
    const double share = l == LayerPlacement::replicated ? 1.0 : 1.0 / tp_;
    UnitTimes t;
    for (int n : unit.forward) t.forward += share * seconds(n);
    for (int n : unit.backward) t.backward += share * seconds(n);
    if (l == LayerPlacement::pair) {
      const double reduce = collective(comm::Collective::allreduce, unit.output_bytes, tp_, tp_link_, tp_per_node_);
      t.forward += reduce;
      t.backward += reduce;
    }
    t.sync = collective(comm::Collective::allreduce, 4 * unit.params * share, dp_, dp_link_, dp_per_node_);
    return t;
  }

  // Between unit u-1 (placed `from`) and unit u (placed `to`), forward and backward.
  double exchange(size_t u, LayerPlacement from, LayerPlacement to) const {
    return u == 0 ? 0.0
                  : exchange_seconds(estimator_, from, to, table_.units[u].input_bytes, tp_, tp_link_, tp_per_node_);
  }
  // After the last unit: the loss reads its output whole.
  double exit(LayerPlacement last) const {
    return exchange_seconds(estimator_, last, LayerPlacement::replicated, table_.units.back().output_bytes, tp_,
                            tp_link_, tp_per_node_);
  }

  // The nodes no unit owns, re-timed (a full simulation does this every time).
  std::pair<double, double> time_rest() const {
    double f = 0, b = 0;
    for (int n : table_.rest_forward) f += seconds(n);
    for (int n : table_.rest_backward) b += seconds(n);
    return {f, b};
  }
  double rest_sync() const { return collective(comm::Collective::allreduce, 4 * table_.rest_params, dp_, dp_link_, dp_per_node_); }

  // The step on one rank: forward, then backward unit by unit from the
  // last, each unit's gradient reduced on the communication stream once
  // its backward is done; the step ends when both streams have.
  double step(const std::vector<UnitTimes>& times, const std::vector<double>& exchanges, double exit_seconds,
              std::pair<double, double> rest, double rest_sync_seconds) const {
    double t = rest.first;
    for (size_t u = 0; u < times.size(); ++u) t += times[u].forward + exchanges[u] / 2;
    t += exit_seconds;
    double comm = 0;
    for (size_t u = times.size(); u-- > 0;) {
      t += times[u].backward + exchanges[u] / 2;
      comm = std::max(comm, t) + times[u].sync;
    }
    t += rest.second;
    comm = std::max(comm, t) + rest_sync_seconds;
    return std::max(t, comm);
  }

 private:
  double seconds(int node) const { return estimator_.compute_seconds(graph_, graph_.nodes()[static_cast<size_t>(node)]); }
  double collective(comm::Collective kind, double bytes, int ranks, LinkClass link, int per_node) const {
    return ranks > 1 ? estimator_.collective_seconds(kind, bytes, ranks, link, per_node) : 0.0;
  }
  const CostEstimator& estimator_;
  const UnitTable& table_;
  const Graph& graph_;
  int dp_, tp_;
  LinkClass tp_link_ = LinkClass::intra_node, dp_link_ = LinkClass::intra_node;
  int tp_per_node_ = 1, dp_per_node_ = 1;  // ClusterSpec::fewest_ranks_on_a_node
};

std::string describe_placements(int dp, int tp, const std::vector<LayerUnit>& units,
                                const std::vector<LayerPlacement>& placements) {
  int blocks = 0, split = 0;
  std::string lone;
  for (size_t i = 0; i < units.size(); ++i) {
    if (units[i].block()) ++blocks, split += placements[i] == LayerPlacement::pair;
    else lone += fmt::format(" {}={}", units[i].name(), layer_placement_name(placements[i]));
  }
  std::string text = fmt::format("pp=1 dp={} tp={} mcmc", dp, tp);
  if (blocks > 0) text += fmt::format(" {}/{} attn+mlp split", split, blocks);
  return text + lone;
}

// Where a walk over one chain stands: each unit's placement, their times
// and the exchanges before them, and the step they make.
struct ChainState {
  std::vector<LayerPlacement> layouts;
  std::vector<UnitTimes> times;
  std::vector<double> exchanges;
  double step = 0;
};

// `from` with unit u placed `next`, re-timed: with `delta` only the unit
// and the exchanges on its two sides, else every unit (and `rest`).
ChainState propose(const Chain& chain, const ChainState& from, size_t u, LayerPlacement next, bool delta,
                   std::pair<double, double>& rest, double rest_sync) {
  const size_t n = from.layouts.size();
  ChainState to;
  to.layouts = from.layouts;
  to.layouts[u] = next;
  if (delta) {
    to.times = from.times;
    to.exchanges = from.exchanges;
    to.times[u] = chain.time_unit(u, next);
    to.exchanges[u] = u > 0 ? chain.exchange(u, to.layouts[u - 1], next) : 0;
    if (u + 1 < n) to.exchanges[u + 1] = chain.exchange(u + 1, next, to.layouts[u + 1]);
  } else {
    to.times.resize(n);
    to.exchanges.assign(n, 0);
    for (size_t v = 0; v < n; ++v) {
      to.times[v] = chain.time_unit(v, to.layouts[v]);
      if (v > 0) to.exchanges[v] = chain.exchange(v, to.layouts[v - 1], to.layouts[v]);
    }
    rest = chain.time_rest();
  }
  to.step = chain.step(to.times, to.exchanges, chain.exit(to.layouts.back()), rest, rest_sync);
  return to;
}

// Metropolis over one chain's placements from all replicated, until
// search.proposals_per_mesh proposals or `chain_end` (seconds into the
// deadline): the best placements seen and their step.
std::pair<std::vector<LayerPlacement>, double> walk(McmcSearch& search, const Chain& chain, Rng& rng,
                                                    const Deadline& deadline, double chain_end) {
  constexpr double kBeta = 20;  // a 5% slower proposal is accepted with probability 1/e
  const std::vector<LayerUnit>& units = chain.units();
  ChainState state{.layouts = std::vector<LayerPlacement>(units.size(), LayerPlacement::replicated),
                   .times = std::vector<UnitTimes>(units.size()),
                   .exchanges = std::vector<double>(units.size(), 0)};
  for (size_t u = 0; u < units.size(); ++u) state.times[u] = chain.time_unit(u, state.layouts[u]);
  std::pair<double, double> rest = chain.time_rest();
  const double rest_sync = chain.rest_sync();
  state.step = chain.step(state.times, state.exchanges, chain.exit(state.layouts.back()), rest, rest_sync);
  std::vector<LayerPlacement> best = state.layouts;
  double best_step = state.step;
  const int limit = search.proposals_per_mesh;
  for (int made = 0; limit > 0 ? made < limit : deadline.elapsed() < chain_end;) {
    for (int k = 0; k < (limit > 0 ? 1 : 64); ++k, ++made) {  // a batch of proposals between clock reads
      const size_t u = static_cast<size_t>(rng.below(units.size()));
      const std::vector<LayerPlacement> choices = placements_of(units[u].split);
      LayerPlacement next = choices[rng.below(choices.size())];
      if (next == state.layouts[u])
        next = choices[(std::find(choices.begin(), choices.end(), next) - choices.begin() + 1) % choices.size()];
      ChainState proposed = propose(chain, state, u, next, search.delta, rest, rest_sync);
      ++search.proposals;
      if (proposed.step <= state.step || rng.uniform() < std::exp(-kBeta * (proposed.step - state.step) / state.step)) {
        state = std::move(proposed);
        if (state.step < best_step) {
          best_step = state.step;
          best = state.layouts;
        }
      }
    }
  }
  return {best, best_step};
}

}  // namespace

std::vector<Candidate> search_mcmc(McmcSearch& search, const Deadline& deadline) {
  const PlanRequest& request = *search.request;
  const ClusterSpec& cluster = *request.cluster;
  std::vector<Candidate> out;
  std::vector<int> tps;
  for (int tp : divisors(request.ranks))
    if (tp > 1 && tp <= cluster.devices_per_node && request.batch >= request.ranks / tp) tps.push_back(tp);
  Rng rng(0x5eed);
  for (size_t m = 0; m < tps.size(); ++m) {
    if (deadline.passed()) {
      search.cut = true;
      break;
    }
    const int tp = tps[m], dp = request.ranks / tp;
    const UnitTable table = unit_table(*search.model, dp, request.batch_inputs, request.space.precision);
    const Chain chain(request, *search.estimator, table, dp, tp);
    const std::vector<LayerUnit>& units = chain.units();
    if (units.empty()) return out;
    // Each mesh gets an equal share of what is left of half the budget.
    const double chain_end = deadline.elapsed() +
                             std::max(0.0, 0.5 * deadline.seconds - deadline.elapsed()) / static_cast<double>(tps.size() - m);
    const auto chain_start = std::chrono::steady_clock::now();
    const auto [best, best_step] = walk(search, chain, rng, deadline, chain_end);
    search.seconds += seconds_since(chain_start);
    if (std::all_of(best.begin(), best.end(), [](LayerPlacement l) { return l == LayerPlacement::replicated; })) continue;
    try {
      Candidate c = evaluate(request, *search.model, placement_strategy(request.batch_inputs, request.space.precision, dp, tp, units, best), *search.estimator,
                             &deadline);
      c.description = describe_placements(dp, tp, units, best);
      c.screened_step_seconds = best_step;
      out.push_back(std::move(c));
    } catch (const DeadlinePassed&) {
      search.cut = true;
      break;
    }
  }
  return out;
}

}  // namespace px::plan
