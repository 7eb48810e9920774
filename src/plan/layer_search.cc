#include "plan/layer_search.h"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>

#include "core/error.h"
#include "parallel/compose.h"
#include "plan/layer_placement.h"
#include "plan/profile.h"
#include "plan/simulate.h"
#include "plan/unit_table.h"

namespace px::plan {
namespace {

// Each unit's compute, forward and backward, whole, by `estimator`.
std::vector<double> unit_seconds(const UnitTable& table, const CostEstimator& estimator) {
  const Graph& g = table.graph();
  std::vector<double> seconds;
  for (const LayerUnit& unit : table.units) {
    double t = 0;
    for (int n : unit.forward) t += estimator.compute_seconds(g, g.nodes()[static_cast<size_t>(n)]);
    for (int n : unit.backward) t += estimator.compute_seconds(g, g.nodes()[static_cast<size_t>(n)]);
    seconds.push_back(t);
  }
  return seconds;
}

std::string describe_placement(int dp, int tp, const std::vector<LayerUnit>& units,
                               const std::vector<LayerPlacement>& placement) {
  std::string text = fmt::format("pp=1 dp={} tp={} layer-wise", dp, tp);
  for (size_t i = 0; i < units.size(); ++i)
    text += fmt::format(" {}={}", units[i].name(), layer_placement_name(placement[i]));
  return text;
}

// The placements of the chain of units that cost least (OptCNN's dynamic
// programme over a chain): unit i's own cost by `own(i, placement)`, each
// boundary's by `transition`; the first unit reads its input whole and the
// loss reads the last unit's output whole. `considered` counts the pairs
// compared.
std::vector<LayerPlacement> cheapest_chain(
    const std::vector<LayerUnit>& layers, const std::function<double(size_t, LayerPlacement)>& own,
    const std::function<double(LayerPlacement, LayerPlacement, double)>& transition, int& considered) {
  // f[i][k]: the cheapest chain up to unit i with unit i placed its k-th way.
  const size_t n = layers.size();
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::vector<std::vector<LayerPlacement>> ways(n);
  std::vector<std::vector<double>> f(n);
  std::vector<std::vector<size_t>> from(n);
  for (size_t i = 0; i < n; ++i) {
    ways[i] = placements_of(layers[i].split);
    f[i].assign(ways[i].size(), kNone);
    from[i].assign(ways[i].size(), 0);
    for (size_t k = 0; k < ways[i].size(); ++k) {
      const double here = own(i, ways[i][k]);
      if (i == 0) {
        f[0][k] = transition(LayerPlacement::replicated, ways[0][k], layers[0].input_bytes) + here;
        continue;
      }
      for (size_t j = 0; j < ways[i - 1].size(); ++j) {
        const double c = f[i - 1][j] + transition(ways[i - 1][j], ways[i][k], layers[i].input_bytes) + here;
        if (c < f[i][k]) f[i][k] = c, from[i][k] = j;
      }
      considered += static_cast<int>(ways[i - 1].size());
    }
  }
  considered += static_cast<int>(ways[0].size());
  size_t best = 0;
  double best_cost = kNone;
  for (size_t k = 0; k < ways[n - 1].size(); ++k) {
    const double c = f[n - 1][k] + transition(ways[n - 1][k], LayerPlacement::replicated, layers[n - 1].output_bytes);
    if (c < best_cost) best_cost = c, best = k;
  }
  std::vector<LayerPlacement> placement(n);
  for (size_t i = n, k = best; i-- > 0;) {
    placement[i] = ways[i][k];
    k = from[i][k];
  }
  return placement;
}

}  // namespace

std::vector<Candidate> search_layers(LayerSearch& search, const Deadline& deadline) {
  const PlanRequest& request = *search.request;
  const CostEstimator& estimator = *search.estimator;
  const ClusterSpec& cluster = *request.cluster;
  std::vector<Candidate> out;
  for (int tp : divisors(request.ranks)) {
    if (tp == 1 || tp > cluster.devices_per_node) continue;
    const int dp = request.ranks / tp;
    if (request.batch < dp) continue;
    if (deadline.passed()) {
      search.cut = true;
      break;
    }
    const UnitTable table = unit_table(*search.model, dp, request.batch_inputs, request.space.precision);
    const std::vector<LayerUnit>& layers = table.units;
    if (layers.empty()) return out;
    const std::vector<double> seconds = unit_seconds(table, estimator);
    const LinkClass tp_link = cluster.link_between(0, tp - 1);
    const LinkClass dp_link = cluster.link_between(0, (dp - 1) * tp);
    const int tp_per_node = cluster.fewest_ranks_on_a_node(tp, 1), dp_per_node = cluster.fewest_ranks_on_a_node(dp, tp);
    auto collective = [&](comm::Collective kind, double bytes, int ranks, LinkClass link, int per_node) {
      return ranks > 1 ? estimator.collective_seconds(kind, bytes, ranks, link, per_node) : 0.0;
    };
    auto transition = [&](LayerPlacement from, LayerPlacement to, double bytes) {
      return exchange_seconds(estimator, from, to, bytes, tp, tp_link, tp_per_node);
    };
    auto own = [&](size_t i, LayerPlacement l) {
      const LayerUnit& layer = layers[i];
      const double share = l == LayerPlacement::replicated ? 1.0 : 1.0 / tp;
      // A split pair's row half reduces its output forward and its input's gradient backward.
      const double inside =
          l == LayerPlacement::pair ? 2 * collective(comm::Collective::allreduce, layer.output_bytes, tp, tp_link, tp_per_node) : 0.0;
      return seconds[i] * share + inside +
             collective(comm::Collective::allreduce, 4 * layer.params * share, dp, dp_link, dp_per_node);
    };
    const std::vector<LayerPlacement> placement = cheapest_chain(layers, own, transition, search.considered);
    if (std::all_of(placement.begin(), placement.end(), [](LayerPlacement l) { return l == LayerPlacement::replicated; }))
      continue;  // data parallelism with tensor ranks repeating it: the grid's dp=ranks is better
    try {
      deadline.check();
      Candidate c =
          evaluate(request, *search.model, placement_strategy(request.batch_inputs, request.space.precision, dp, tp, layers, placement), estimator, &deadline);
      c.description = describe_placement(dp, tp, layers, placement);
      out.push_back(std::move(c));
    } catch (const DeadlinePassed&) {
      search.cut = true;
      break;
    }
  }
  return out;
}

}  // namespace px::plan
