#include "parallel/lower/stages.h"

#include <algorithm>
#include <limits>
#include <set>

#include "core/error.h"
#include "graph/op.h"

namespace px::parallel {
namespace {

double bytes_of(const TensorSpec& spec) {
  return static_cast<double>(spec.shape.numel()) * static_cast<double>(dtype_size(spec.dtype));
}

// A node's cost for balancing: flops plus bytes moved, from the op's cost
// function (streaming its inputs and outputs when it has none).
double node_cost(const Graph& graph, const Node& node) {
  std::vector<TensorSpec> in, out;
  for (ValueId v : node.inputs) in.push_back(graph.spec(v));
  for (ValueId v : node.outputs) out.push_back(graph.spec(v));
  const OpCost c = node.def->cost ? node.def->cost(in, out, node.attrs) : streaming_cost(in, out);
  return c.flops + c.bytes_read + c.bytes_written;
}

bool is_activation(const Graph& graph, ValueId v) { return graph.value(v).kind == Value::Kind::activation; }

// Per forward node: its cost plus the cost of the backward nodes it is the
// origin of.
std::vector<double> forward_costs(const Graph& graph, int forward_nodes) {
  std::vector<double> cost(static_cast<size_t>(forward_nodes), 0.0);
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const Node& node = graph.nodes()[n];
    const int at = static_cast<int>(n) < forward_nodes ? static_cast<int>(n) : node.origin;
    if (at >= 0 && at < forward_nodes) cost[static_cast<size_t>(at)] += node_cost(graph, node);
  }
  return cost;
}

// bytes[i]: what crosses a cut before forward node i (values made before
// i and read by a forward node at or after i), floats counted at float32's
// width: the places between layers are the model's structure, so bf16
// storage (a GEMM operand kept in bf16 narrows a cut inside a layer) moves
// no stage and a strategy cuts the same layers in either precision.
std::vector<double> crossing_bytes(const Graph& graph, int forward_nodes) {
  const auto structural_bytes = [](const TensorSpec& spec) {
    return spec.dtype == DType::bf16 ? 2.0 * bytes_of(spec) : bytes_of(spec);
  };
  std::vector<double> delta(static_cast<size_t>(forward_nodes) + 1, 0.0);
  std::vector<int> last_read(graph.values().size(), -1);
  for (int n = 0; n < forward_nodes; ++n)
    for (ValueId v : graph.nodes()[static_cast<size_t>(n)].inputs) last_read[static_cast<size_t>(v)] = n;
  for (size_t v = 0; v < graph.values().size(); ++v) {
    const Value& value = graph.values()[v];
    if (value.kind != Value::Kind::activation || value.producer >= forward_nodes || last_read[v] <= value.producer)
      continue;
    delta[static_cast<size_t>(value.producer) + 1] += structural_bytes(value.spec);
    delta[static_cast<size_t>(last_read[v]) + 1] -= structural_bytes(value.spec);
  }
  std::vector<double> bytes(static_cast<size_t>(forward_nodes), 0.0);
  double running = 0;
  for (int i = 0; i < forward_nodes; ++i) bytes[static_cast<size_t>(i)] = running += delta[static_cast<size_t>(i)];
  return bytes;
}

}  // namespace

StageCrossings stage_crossings(const Graph& graph, int forward_nodes, const std::vector<int>& stage_of_node,
                               int stages, const std::vector<int>& nodes) {
  const size_t values = graph.values().size();
  std::vector<bool> runs(graph.nodes().size(), false);
  std::vector<int> first_reader(values, stages), last_reader(values, -1);
  for (int n : nodes) {
    runs[static_cast<size_t>(n)] = true;
    for (ValueId v : graph.nodes()[static_cast<size_t>(n)].inputs) {
      first_reader[static_cast<size_t>(v)] = std::min(first_reader[static_cast<size_t>(v)], stage_of_node[static_cast<size_t>(n)]);
      last_reader[static_cast<size_t>(v)] = std::max(last_reader[static_cast<size_t>(v)], stage_of_node[static_cast<size_t>(n)]);
    }
  }
  StageCrossings c;
  c.forward.resize(static_cast<size_t>(std::max(stages - 1, 0)));
  c.backward.resize(c.forward.size());
  for (size_t v = 0; v < values; ++v) {
    const Value& value = graph.values()[v];
    if (value.kind != Value::Kind::activation || !runs[static_cast<size_t>(value.producer)]) continue;
    const int made = stage_of_node[static_cast<size_t>(value.producer)];
    const bool forward = value.producer < forward_nodes;
    if (forward && first_reader[v] < made)
      fail("pipeline: '{}' is made in forward on stage {} but read on the earlier stage {}; cut elsewhere "
           "(--stage-cuts)",
           value.name, made, first_reader[v]);
    if (!forward && last_reader[v] > made)
      fail("pipeline: '{}' is made in backward on stage {} but read on the later stage {}; cut elsewhere "
           "(--stage-cuts)",
           value.name, made, last_reader[v]);
    for (int k = made; forward && k < last_reader[v]; ++k) c.forward[static_cast<size_t>(k)].push_back(static_cast<ValueId>(v));
    for (int k = first_reader[v]; !forward && k < made; ++k)
      c.backward[static_cast<size_t>(k)].push_back(static_cast<ValueId>(v));
  }
  return c;
}

StageAssignment assign_stages(const Graph& graph, int forward_nodes, const std::vector<int>& first_node) {
  const int stages = static_cast<int>(first_node.size());
  if (stages < 1 || first_node.front() != 0)
    fail("pipeline stages must start with the first node, got starts [{}]", fmt::join(first_node, ", "));
  for (int s = 1; s < stages; ++s)
    if (first_node[static_cast<size_t>(s)] <= first_node[static_cast<size_t>(s) - 1] ||
        first_node[static_cast<size_t>(s)] >= forward_nodes)
      fail("pipeline stage starts [{}] must increase and stay below the {} forward nodes",
           fmt::join(first_node, ", "), forward_nodes);
  StageAssignment a;
  a.stages = stages;
  a.first_node = first_node;
  a.stage_of_node.assign(graph.nodes().size(), stages - 1);
  for (int s = 0, n = 0; n < forward_nodes; ++n) {
    while (s + 1 < stages && n >= first_node[static_cast<size_t>(s) + 1]) ++s;
    a.stage_of_node[static_cast<size_t>(n)] = s;
  }
  for (size_t n = static_cast<size_t>(forward_nodes); n < graph.nodes().size(); ++n) {
    const Node& node = graph.nodes()[n];
    if (node.origin >= 0) {
      a.stage_of_node[n] = a.stage_of_node[static_cast<size_t>(node.origin)];
    } else {  // not made by a backward rule: with what it reads
      for (ValueId v : node.inputs)
        if (is_activation(graph, v)) {
          a.stage_of_node[n] = a.stage_of_node[static_cast<size_t>(graph.value(v).producer)];
          break;
        }
    }
  }
  std::vector<int> every_node(graph.nodes().size());
  for (size_t n = 0; n < every_node.size(); ++n) every_node[n] = static_cast<int>(n);
  a.crossing = stage_crossings(graph, forward_nodes, a.stage_of_node, stages, every_node).forward;
  std::vector<std::set<int>> param_stages(graph.values().size());
  for (size_t n = 0; n < graph.nodes().size(); ++n)
    for (ValueId v : graph.nodes()[n].inputs)
      if (graph.value(v).kind == Value::Kind::param) param_stages[static_cast<size_t>(v)].insert(a.stage_of_node[n]);
  for (ValueId p : graph.params())
    if (param_stages[static_cast<size_t>(p)].size() > 1)
      a.shared_params.push_back({p, std::vector<int>(param_stages[static_cast<size_t>(p)].begin(),
                                                     param_stages[static_cast<size_t>(p)].end())});
  a.cost.assign(static_cast<size_t>(stages), 0.0);
  for (size_t n = 0; n < graph.nodes().size(); ++n)
    a.cost[static_cast<size_t>(a.stage_of_node[n])] += node_cost(graph, graph.nodes()[n]);
  return a;
}

std::vector<int> balanced_stage_starts(const Graph& graph, int forward_nodes, int stages,
                                       std::span<const double> speeds) {
  if (stages < 1) fail("pipeline: {} stages, expected at least 1", stages);
  if (!speeds.empty() && static_cast<int>(speeds.size()) != stages)
    fail("pipeline: {} stage speeds for {} stages", speeds.size(), stages);
  auto speed = [&](int s) { return speeds.empty() ? 1.0 : speeds[static_cast<size_t>(s)]; };
  if (stages == 1) return {0};
  const std::vector<double> cost = forward_costs(graph, forward_nodes);
  std::vector<double> prefix(static_cast<size_t>(forward_nodes) + 1, 0.0);
  for (int n = 0; n < forward_nodes; ++n)
    prefix[static_cast<size_t>(n) + 1] = prefix[static_cast<size_t>(n)] + cost[static_cast<size_t>(n)];
  const double total = prefix.back();
  // The narrowest cut away from the ends (where a stage would be next to
  // nothing), and every cut as narrow: the places between layers.
  const std::vector<double> bytes = crossing_bytes(graph, forward_nodes);
  double narrowest = std::numeric_limits<double>::infinity();
  for (int i = 1; i < forward_nodes; ++i)
    if (prefix[static_cast<size_t>(i)] >= 0.05 * total && prefix[static_cast<size_t>(i)] <= 0.95 * total)
      narrowest = std::min(narrowest, bytes[static_cast<size_t>(i)]);
  std::vector<int> candidates{0};
  for (int i = 1; i < forward_nodes; ++i)
    if (bytes[static_cast<size_t>(i)] <= narrowest * 1.0001) candidates.push_back(i);
  const int k = static_cast<int>(candidates.size());
  if (k < stages)
    fail("pipeline: the model has {} places to cut between layers (where {} bytes cross), too few for {} stages",
         k - 1, narrowest, stages);
  candidates.push_back(forward_nodes);
  // best[s][j]: the smallest largest stage cost cutting nodes before
  // candidate j into s + 1 stages; from[s][j]: the previous cut.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<size_t>(stages), std::vector<double>(candidates.size(), inf));
  std::vector<std::vector<int>> from(static_cast<size_t>(stages), std::vector<int>(candidates.size(), -1));
  auto span = [&](int i, int j) {
    return prefix[static_cast<size_t>(candidates[static_cast<size_t>(j)])] -
           prefix[static_cast<size_t>(candidates[static_cast<size_t>(i)])];
  };
  for (int j = 1; j <= k; ++j) best[0][static_cast<size_t>(j)] = span(0, j) / speed(0);
  for (int s = 1; s < stages; ++s)
    for (int j = s + 1; j <= k; ++j)
      for (int i = s; i < j; ++i) {
        const double worst = std::max(best[static_cast<size_t>(s) - 1][static_cast<size_t>(i)], span(i, j) / speed(s));
        if (worst < best[static_cast<size_t>(s)][static_cast<size_t>(j)]) {
          best[static_cast<size_t>(s)][static_cast<size_t>(j)] = worst;
          from[static_cast<size_t>(s)][static_cast<size_t>(j)] = i;
        }
      }
  std::vector<int> starts(static_cast<size_t>(stages), 0);
  for (int s = stages - 1, j = k; s > 0; --s) {
    j = from[static_cast<size_t>(s)][static_cast<size_t>(j)];
    starts[static_cast<size_t>(s)] = candidates[static_cast<size_t>(j)];
  }
  return starts;
}

std::vector<int> stage_starts_at(const Graph& graph, int forward_nodes, const std::vector<std::string>& layers) {
  std::vector<int> starts{0};
  for (const std::string& layer : layers) {
    int found = -1;
    for (int n = 0; n < forward_nodes && found < 0; ++n) {
      const std::string& name = graph.nodes()[static_cast<size_t>(n)].name;
      if (name == layer || name.rfind(layer + ".", 0) == 0) found = n;
    }
    if (found < 0) fail("--stage-cuts: the model has no layer '{}' (layers are named like h.0, h.1, ...)", layer);
    if (found <= starts.back())
      fail("--stage-cuts: layer '{}' does not come after the previous cut; name the layers in model order", layer);
    starts.push_back(found);
  }
  return starts;
}

}  // namespace px::parallel
