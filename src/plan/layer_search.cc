#include "plan/layer_search.h"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <map>

#include "core/error.h"
#include "parallel/compose.h"
#include "plan/layer_placement.h"
#include "plan/profile.h"
#include "plan/simulate.h"

namespace px::plan {
namespace {

// What one unit (a lone layer or a block, parallel/split_units.h) costs, from the data-parallel lowering.
struct Layer {
  parallel::SplitUnit unit;
  double seconds = 0;      // forward and backward, whole
  double params = 0;       // its parameters' elements
  double input_bytes = 0;  // its input activation (this rank's rows); a block's: its output, reduced whole
  double output_bytes = 0;
};

// The model's units on one data rank of `dp`, their costs by `estimator`.
std::vector<Layer> measure_layers(const PlanRequest& request, const CostEstimator& estimator, const nn::Model& model,
                                  int dp) {
  const parallel::Program p = parallel::lower({.forward = &model.graph, .loss = model.loss},
                                              parallel::data_parallel(dp, request.batch_inputs), 0);
  const Graph& g = p.graphs.front();
  std::vector<Layer> layers;
  std::vector<int> owner(g.nodes().size(), -1);
  std::map<std::string, size_t> param_owner;
  for (parallel::SplitUnit& unit : parallel::split_units(g)) {
    for (int n : unit.nodes) owner[static_cast<size_t>(n)] = static_cast<int>(layers.size());
    for (const parallel::GemmLayer& l : unit.layers) {
      param_owner[l.weight] = layers.size();
      if (!l.bias.empty()) param_owner[l.bias] = layers.size();
    }
    Layer layer{.unit = std::move(unit)};
    const parallel::GemmLayer &first = layer.unit.layers.front(), &last = layer.unit.layers.back();
    layer.output_bytes = static_cast<double>(g.spec(last.output).shape.numel()) * 4;
    layer.input_bytes = layer.unit.block() ? layer.output_bytes : static_cast<double>(g.spec(first.input).shape.numel()) * 4;
    layers.push_back(std::move(layer));
  }
  for (const parallel::Instr& instr : p.instrs) {
    const auto* c = std::get_if<parallel::Compute>(&instr.op);
    if (!c || instr.micro_batch != 0) continue;
    const Node& n = g.nodes()[static_cast<size_t>(c->node)];
    const int unit = owner[static_cast<size_t>(n.origin >= 0 ? n.origin : c->node)];
    if (unit >= 0) layers[static_cast<size_t>(unit)].seconds += estimator.compute_seconds(g, n);
  }
  for (const parallel::ParamLayout& param : p.params)
    if (auto it = param_owner.find(param.name); it != param_owner.end())
      layers[it->second].params += static_cast<double>(param.global_shape.numel());
  return layers;
}

// The seeds of one placement of the chain, on mesh {dp, tp}.
parallel::Strategy strategy_of(const PlanRequest& request, int dp, int tp, const std::vector<Layer>& layers,
                               const std::vector<LayerPlacement>& placement) {
  parallel::Strategy s = parallel::data_tensor_mesh(dp, tp, request.batch_inputs);
  for (size_t i = 0; i < layers.size(); ++i) seed_layer(s, layers[i].unit, placement[i]);
  return s;
}

std::string describe_placement(int dp, int tp, const std::vector<Layer>& layers,
                               const std::vector<LayerPlacement>& placement) {
  std::string text = fmt::format("pp=1 dp={} tp={} layer-wise", dp, tp);
  for (size_t i = 0; i < layers.size(); ++i)
    text += fmt::format(" {}={}", layers[i].unit.name, layer_placement_name(placement[i]));
  return text;
}

// The placements of the chain of units that cost least (OptCNN's dynamic
// programme over a chain): each unit's own cost by `own`, each boundary's
// by `transition`; the first unit reads its input whole and the loss reads
// the last unit's output whole. `considered` counts the pairs compared.
std::vector<LayerPlacement> cheapest_chain(
    const std::vector<Layer>& layers, const std::function<double(const Layer&, LayerPlacement)>& own,
    const std::function<double(LayerPlacement, LayerPlacement, double)>& transition, int& considered) {
  // f[i][k]: the cheapest chain up to unit i with unit i placed its k-th way.
  const size_t n = layers.size();
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::vector<std::vector<LayerPlacement>> ways(n);
  std::vector<std::vector<double>> f(n);
  std::vector<std::vector<size_t>> from(n);
  for (size_t i = 0; i < n; ++i) {
    ways[i] = placements_of(layers[i].unit);
    f[i].assign(ways[i].size(), kNone);
    from[i].assign(ways[i].size(), 0);
    for (size_t k = 0; k < ways[i].size(); ++k) {
      const double here = own(layers[i], ways[i][k]);
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
    const std::vector<Layer> layers = measure_layers(request, estimator, *search.model, dp);
    if (layers.empty()) return out;
    const LinkClass tp_link = cluster.link_between(0, tp - 1);
    const LinkClass dp_link = cluster.link_between(0, (dp - 1) * tp);
    auto collective = [&](comm::Collective kind, double bytes, int ranks, LinkClass link) {
      return ranks > 1 ? estimator.collective_seconds(kind, bytes, ranks, link) : 0.0;
    };
    auto transition = [&](LayerPlacement from, LayerPlacement to, double bytes) {
      return exchange_seconds(estimator, from, to, bytes, tp, tp_link);
    };
    auto own = [&](const Layer& layer, LayerPlacement l) {
      const double share = l == LayerPlacement::replicated ? 1.0 : 1.0 / tp;
      // A split pair's row half reduces its output forward and its input's gradient backward.
      const double inside =
          l == LayerPlacement::pair ? 2 * collective(comm::Collective::allreduce, layer.output_bytes, tp, tp_link) : 0.0;
      return layer.seconds * share + inside +
             collective(comm::Collective::allreduce, 4 * layer.params * share, dp, dp_link);
    };
    const std::vector<LayerPlacement> placement = cheapest_chain(layers, own, transition, search.considered);
    if (std::all_of(placement.begin(), placement.end(), [](LayerPlacement l) { return l == LayerPlacement::replicated; }))
      continue;  // data parallelism with tensor ranks repeating it: the grid's dp=ranks is better
    try {
      deadline.check();
      Candidate c =
          evaluate(request, *search.model, strategy_of(request, dp, tp, layers, placement), estimator, &deadline);
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
