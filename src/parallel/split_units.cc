#include "parallel/split_units.h"

#include <algorithm>
#include <optional>
#include <set>

namespace px::parallel {
namespace {

// A region between two layers larger than this is not a block's inside
// (an unfused attention is about fifteen nodes).
constexpr size_t kMaxRegionNodes = 48;

bool is_forward_node(const Node& n) { return n.origin < 0 && n.op() != "reshard"; }

// A parameter read by nothing but one node.
bool own_param(const Graph& graph, const std::vector<std::vector<int>>& readers, ValueId v) {
  return graph.value(v).kind == Value::Kind::param && readers[static_cast<size_t>(v)].size() == 1;
}

// Node `index` as a conv layer: its weight and bias its own parameters.
std::optional<GemmLayer> conv_layer(const Graph& graph, const std::vector<std::vector<int>>& readers, int index) {
  const Node& n = graph.nodes()[static_cast<size_t>(index)];
  if (graph.value(n.inputs[0]).kind == Value::Kind::param) return std::nullopt;
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (!own_param(graph, readers, n.inputs[i])) return std::nullopt;
  GemmLayer layer{.node = index, .out_dim = 0, .input = n.inputs[0], .output = n.outputs[0], .conv = true};
  layer.weight = graph.value(n.inputs[1]).name;
  layer.name = layer.weight.ends_with(".weight") ? layer.weight.substr(0, layer.weight.size() - 7) : layer.weight;
  if (n.inputs.size() == 3) layer.bias = graph.value(n.inputs[2]).name;
  layer.nodes.push_back(index);
  return layer;
}

// Node `index` as a GEMM layer, if it is one.
std::optional<GemmLayer> gemm_layer(const Graph& graph, const std::vector<std::vector<int>>& readers, int index) {
  const Node& n = graph.nodes()[static_cast<size_t>(index)];
  if (n.op() == "conv2d") return conv_layer(graph, readers, index);
  const bool linear = n.op() == "linear", matmul = n.op() == "matmul";
  if (!(linear || matmul) || n.inputs.size() != 2) return std::nullopt;
  if (graph.value(n.inputs[0]).kind == Value::Kind::param) return std::nullopt;
  GemmLayer layer{.node = index, .input = n.inputs[0], .output = n.outputs[0]};
  layer.out_dim = matmul && n.attrs.get_int("trans_b", 0) != 0 ? 0 : 1;
  ValueId w = n.inputs[1];
  if (graph.value(w).kind != Value::Kind::param) {  // torch's MatMul of W.t(): a transpose of the parameter
    const int producer = graph.value(w).producer;
    if (producer < 0 || readers[static_cast<size_t>(w)].size() != 1) return std::nullopt;
    const Node& t = graph.nodes()[static_cast<size_t>(producer)];
    if (t.op() != "transpose" || t.attrs.get_ints("perm") != std::vector<int64_t>{1, 0} ||
        graph.value(t.inputs[0]).kind != Value::Kind::param)
      return std::nullopt;
    layer.nodes.push_back(producer);
    layer.out_dim = 1 - layer.out_dim;
    w = t.inputs[0];
  }
  if (graph.spec(w).shape.rank() != 2 || readers[static_cast<size_t>(w)].size() != 1) return std::nullopt;  // tied
  layer.weight = graph.value(w).name;
  layer.name = layer.weight.ends_with(".weight") ? layer.weight.substr(0, layer.weight.size() - 7) : layer.weight;
  layer.nodes.push_back(index);
  if (const std::vector<int>& r = readers[static_cast<size_t>(layer.output)]; r.size() == 1) {
    const Node& b = graph.nodes()[static_cast<size_t>(r[0])];
    if (b.op() == "bias_add" && b.inputs[0] == layer.output && graph.value(b.inputs[1]).kind == Value::Kind::param &&
        readers[static_cast<size_t>(b.inputs[1])].size() == 1) {
      layer.bias = graph.value(b.inputs[1]).name;
      layer.output = b.outputs[0];
      layer.nodes.push_back(r[0]);
    }
  }
  return layer;
}

// From a layer's output forward: the one layer (index into `layers`) whose
// input the region reaches, and the region's nodes; -1 when the region
// reads a value from outside (a residual add, the loss's labels), has no
// or two exits, or grows too large.
std::pair<int, std::vector<int>> region_after(const Graph& graph, const std::vector<std::vector<int>>& readers,
                                              const std::vector<int>& layer_at, const GemmLayer& from) {
  std::set<ValueId> inside{from.output};
  std::set<int> nodes;
  std::vector<ValueId> frontier{from.output};
  int exit = -1;
  while (!frontier.empty()) {
    const ValueId v = frontier.back();
    frontier.pop_back();
    for (int reader : readers[static_cast<size_t>(v)]) {
      const Node& n = graph.nodes()[static_cast<size_t>(reader)];
      if (const int l = layer_at[static_cast<size_t>(reader)]; l >= 0 && n.inputs[0] == v) {
        if (exit >= 0 && exit != l) return {-1, {}};
        exit = l;
        continue;
      }
      if (!nodes.insert(reader).second) continue;
      if (nodes.size() > kMaxRegionNodes) return {-1, {}};
      for (ValueId out : n.outputs)
        if (inside.insert(out).second) frontier.push_back(out);
    }
  }
  for (int index : nodes) {
    const Node& node = graph.nodes()[static_cast<size_t>(index)];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      const Value& value = graph.value(v);
      if (value.kind == Value::Kind::param || inside.count(v)) continue;
      // An attention core's inputs past q|k|v (paged attention's segment
      // table) say where each row attends, they carry no activation in.
      if (node.def->attention_core && i > 0) continue;
      if (value.kind == Value::Kind::activation) {  // a constant made in the graph (arange) is not an entry
        const Node& p = graph.nodes()[static_cast<size_t>(value.producer)];
        if (std::none_of(p.inputs.begin(), p.inputs.end(),
                         [&](ValueId in) { return graph.value(in).kind != Value::Kind::param; }))
          continue;
      }
      return {-1, {}};
    }
  }
  if (exit < 0) return {-1, {}};
  return {exit, std::vector<int>(nodes.begin(), nodes.end())};
}

// The residual stream `row`'s output (past a dropout) is added to, when
// `column`'s input was made from it (past a LayerNorm); kNoValue when the
// pair is not on a residual branch.
ValueId residual_stream(const Graph& graph, const std::vector<std::vector<int>>& readers, const GemmLayer& column,
                        const GemmLayer& row) {
  ValueId out = row.output;
  for (int step = 0; step < 3; ++step) {
    const std::vector<int>& r = readers[static_cast<size_t>(out)];
    if (r.size() != 1) return kNoValue;
    const Node& n = graph.nodes()[static_cast<size_t>(r[0])];
    if (n.op() == "add" && n.inputs.size() == 2) {
      const ValueId other = n.inputs[0] == out ? n.inputs[1] : n.inputs[0];
      ValueId v = column.input;
      for (int up = 0; up < 3; ++up) {
        if (v == other) return other;
        const int producer = graph.value(v).producer;
        if (producer < 0) break;
        v = graph.nodes()[static_cast<size_t>(producer)].inputs.front();
      }
      return kNoValue;
    }
    if (n.outputs.empty()) return kNoValue;
    out = n.outputs.front();
  }
  return kNoValue;
}

// "h.0.attn.c_attn" and "h.0.attn.c_proj" -> "h.0.attn"; "h.0.c_fc" and
// "h.0.mlp_proj" -> "h.0.mlp".
std::string block_name(const GemmLayer& column, const GemmLayer& row, bool attention) {
  size_t common = 0;
  while (common < column.name.size() && common < row.name.size() && column.name[common] == row.name[common]) ++common;
  const size_t dot = column.name.rfind('.', common);
  std::string scope = dot == std::string::npos || dot > common ? "" : column.name.substr(0, dot);
  const std::string kind = attention ? "attn" : "mlp";
  if (scope.empty()) return column.name + "." + kind;
  return scope.ends_with(kind) ? scope : scope + "." + kind;
}

}  // namespace

std::vector<std::vector<int>> forward_readers(const Graph& graph) {
  std::vector<std::vector<int>> readers(graph.values().size());
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& n = graph.nodes()[i];
    if (!is_forward_node(n)) continue;
    for (ValueId v : n.inputs) {
      std::vector<int>& r = readers[static_cast<size_t>(v)];
      if (r.empty() || r.back() != static_cast<int>(i)) r.push_back(static_cast<int>(i));
    }
  }
  return readers;
}


std::vector<SplitUnit> split_units(const Graph& graph) {
  const std::vector<std::vector<int>> readers = forward_readers(graph);
  std::vector<GemmLayer> layers;
  std::vector<int> layer_at(graph.nodes().size(), -1);
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    if (!is_forward_node(graph.nodes()[i])) continue;
    if (std::optional<GemmLayer> layer = gemm_layer(graph, readers, static_cast<int>(i))) {
      layer_at[i] = static_cast<int>(layers.size());
      layers.push_back(std::move(*layer));
    }
  }
  std::vector<std::pair<int, std::vector<int>>> after(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) after[i] = region_after(graph, readers, layer_at, layers[i]);

  std::vector<SplitUnit> units;
  std::vector<int> unit_of(layers.size(), -1);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (unit_of[i] >= 0) continue;
    const auto& [next, region] = after[i];
    SplitUnit unit;
    // Convolutions stay lone layers: a chain of two is the same split as a pair, and no Megatron block.
    const bool gemms = next >= 0 && !layers[i].conv && !layers[static_cast<size_t>(next)].conv;
    const ValueId residual = gemms && unit_of[static_cast<size_t>(next)] < 0
                                 ? residual_stream(graph, readers, layers[i], layers[static_cast<size_t>(next)])
                                 : kNoValue;
    if (residual != kNoValue) {
      const GemmLayer& row = layers[static_cast<size_t>(next)];
      const bool attention = std::any_of(region.begin(), region.end(), [&](int n) {
        return graph.nodes()[static_cast<size_t>(n)].def->attention_core;
      });
      unit = {.name = block_name(layers[i], row, attention),
              .layers = {layers[i], row},
              .groups = attention ? 3 : 1,
              .residual = residual};
      unit.nodes = layers[i].nodes;
      unit.nodes.insert(unit.nodes.end(), region.begin(), region.end());
      unit.nodes.insert(unit.nodes.end(), row.nodes.begin(), row.nodes.end());
      unit_of[static_cast<size_t>(next)] = static_cast<int>(units.size());
    } else {
      unit = {.name = layers[i].name, .layers = {layers[i]}, .nodes = layers[i].nodes};
    }
    std::sort(unit.nodes.begin(), unit.nodes.end());
    unit_of[i] = static_cast<int>(units.size());
    units.push_back(std::move(unit));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    SplitUnit& unit = units[static_cast<size_t>(unit_of[i])];
    const int next = after[i].first;
    if (unit.block() || next < 0) continue;
    const int target = unit_of[static_cast<size_t>(next)];
    if (!units[static_cast<size_t>(target)].block()) unit.next = target;
  }
  return units;
}

std::vector<PlacementSeed> column_seeds(const GemmLayer& layer, const std::string& axis, int groups) {
  std::vector<PlacementSeed> seeds{{layer.weight, axis, Placement::S(layer.out_dim, groups)}};
  if (!layer.bias.empty()) seeds.push_back({layer.bias, axis, Placement::S(0, groups)});
  return seeds;
}

std::vector<PlacementSeed> row_seeds(const GemmLayer& layer, const std::string& axis) {
  return {{layer.weight, axis, Placement::S(1 - layer.out_dim)}};
}

}  // namespace px::parallel
