#include "parallel/lower/propagate.h"

#include "core/error.h"

namespace px::parallel {
namespace {

std::string list(const std::vector<Placement>& placements) {
  std::string s = "(";
  for (size_t i = 0; i < placements.size(); ++i) s += (i ? ", " : "") + placements[i].str();
  return s + ")";
}

}  // namespace

Propagation propagate(const Graph& graph, const std::vector<Placement>& seeds) {
  const auto& values = graph.values();
  Propagation result;
  result.of_value.assign(values.size(), Placement::B());
  for (size_t v = 0; v < values.size(); ++v) {
    if (values[v].kind == Value::Kind::activation) continue;
    if (v >= seeds.size()) fail("placement of '{}' was not given", values[v].name);
    result.of_value[v] = seeds[v];
  }
  for (const Node& node : graph.nodes()) {
    std::vector<Placement> in;
    std::vector<TensorSpec> specs;
    for (ValueId id : node.inputs) {
      in.push_back(result.of_value[static_cast<size_t>(id)]);
      specs.push_back(graph.spec(id));
    }
    const std::vector<PlacementSignature> offered = node.def->signatures(specs, node.attrs);
    const PlacementSignature* chosen = nullptr;
    for (const PlacementSignature& s : offered)
      if (s.inputs == in) {
        chosen = &s;
        break;
      }
    if (chosen == nullptr) {
      std::string options;
      for (const PlacementSignature& s : offered) options += "\n  " + s.str();
      fail("placement: node '{}' ({}) gets inputs {} and no signature of the op takes them; it offers:{}",
           node.name, node.op(), list(in), options);
    }
    PX_CHECK_EQ(chosen->outputs.size(), node.outputs.size());
    for (size_t i = 0; i < node.outputs.size(); ++i)
      result.of_value[static_cast<size_t>(node.outputs[i])] = chosen->outputs[i];
    result.of_node.push_back(*chosen);
  }
  return result;
}

}  // namespace px::parallel
