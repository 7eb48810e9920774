#include "plan/layer_search.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>

#include "core/error.h"
#include "parallel/compose.h"
#include "plan/layer_placement.h"
#include "plan/profile.h"
#include "plan/simulate.h"

namespace px::plan {
namespace {

constexpr std::array kLayouts{LayerPlacement::replicated, LayerPlacement::column, LayerPlacement::row};

// What one fully-connected layer costs, from the data-parallel lowering.
struct Layer {
  int index = 0;           // fc<index>
  double seconds = 0;      // forward and backward, whole
  double params = 0;       // weight and bias elements
  double input_bytes = 0;  // its input activation (this rank's rows)
  double output_bytes = 0;
};

// The chain's layers on one data rank of `dp`, their costs by `estimator`.
std::vector<Layer> measure_layers(const PlanRequest& request, const CostEstimator& estimator, const nn::Model& model,
                                  int dp) {
  const parallel::Program p = parallel::lower({.forward = &model.graph, .loss = model.loss},
                                              parallel::data_parallel(dp, request.batch_inputs), 0);
  const Graph& g = p.graphs.front();
  std::map<int, Layer> layers;
  for (const parallel::Instr& instr : p.instrs) {
    const auto* c = std::get_if<parallel::Compute>(&instr.op);
    if (!c || instr.micro_batch != 0) continue;
    const Node& n = g.nodes()[static_cast<size_t>(c->node)];
    const Node& forward = n.origin >= 0 ? g.nodes()[static_cast<size_t>(n.origin)] : n;
    const int index = fc_index(forward.name);
    if (index == 0) continue;
    Layer& layer = layers[index];
    layer.index = index;
    layer.seconds += estimator.compute_seconds(g, n);
    if (n.origin < 0 && n.op() == "linear") {
      layer.input_bytes = static_cast<double>(g.spec(n.inputs.front()).shape.numel()) * 4;
      layer.output_bytes = static_cast<double>(g.spec(n.outputs.front()).shape.numel()) * 4;
    }
  }
  for (const parallel::ParamLayout& param : p.params)
    if (const int index = fc_index(param.name); index > 0 && layers.count(index))
      layers[index].params += static_cast<double>(param.global_shape.numel());
  std::vector<Layer> out;
  for (auto& [index, layer] : layers) out.push_back(layer);
  return out;
}

// The seeds of one placement of the chain, on mesh {dp, tp}.
parallel::Strategy strategy_of(const PlanRequest& request, int dp, int tp, const std::vector<Layer>& layers,
                               const std::vector<LayerPlacement>& placement) {
  parallel::Strategy s = parallel::data_tensor_mesh(dp, tp, request.batch_inputs);
  for (size_t i = 0; i < layers.size(); ++i) seed_layer(s, fmt::format("fc{}", layers[i].index), placement[i]);
  return s;
}

std::string describe_placement(int dp, int tp, const std::vector<Layer>& layers,
                               const std::vector<LayerPlacement>& placement) {
  std::string text = fmt::format("pp=1 dp={} tp={} layer-wise", dp, tp);
  for (size_t i = 0; i < layers.size(); ++i)
    text += fmt::format(" fc{}={}", layers[i].index, layer_placement_name(placement[i]));
  return text;
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
      return layer.seconds * share + collective(comm::Collective::allreduce, 4 * layer.params * share, dp, dp_link);
    };
    // f[i][l]: the cheapest chain up to layer i with layer i placed l; the input of layer 0 is whole.
    const size_t n = layers.size();
    constexpr double kNone = std::numeric_limits<double>::infinity();
    std::vector<std::array<double, 3>> f(n, {kNone, kNone, kNone});
    std::vector<std::array<int, 3>> from(n, {0, 0, 0});
    for (size_t li = 0; li < 3; ++li)
      f[0][li] = transition(LayerPlacement::replicated, kLayouts[li], layers[0].input_bytes) + own(layers[0], kLayouts[li]);
    for (size_t i = 1; i < n; ++i)
      for (size_t li = 0; li < 3; ++li)
        for (size_t pi = 0; pi < 3; ++pi) {
          const double c = f[i - 1][pi] + transition(kLayouts[pi], kLayouts[li], layers[i].input_bytes) +
                           own(layers[i], kLayouts[li]);
          if (c < f[i][li]) {
            f[i][li] = c;
            from[i][li] = static_cast<int>(pi);
          }
        }
    search.considered += static_cast<int>(9 * (n - 1) + 3);
    // The loss reads the last layer's output whole.
    size_t best = 0;
    double best_cost = kNone;
    for (size_t li = 0; li < 3; ++li) {
      const double c = f[n - 1][li] + transition(kLayouts[li], LayerPlacement::replicated, layers[n - 1].output_bytes);
      if (c < best_cost) best_cost = c, best = li;
    }
    std::vector<LayerPlacement> placement(n);
    for (size_t i = n, l = best; i-- > 0;) {
      placement[i] = kLayouts[l];
      l = static_cast<size_t>(from[i][l]);
    }
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
