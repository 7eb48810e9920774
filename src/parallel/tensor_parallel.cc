#include "parallel/tensor_parallel.h"

#include <map>
#include <set>

#include "core/error.h"
#include "parallel/split_units.h"

namespace px::parallel {

std::vector<PlacementSeed> megatron_seeds(const Graph& graph, const std::string& axis, bool sequence_parallel) {
  // Every split found by structure (parallel/split_units.h): each block's
  // column and row layer; lone layers in chains, column then row, two by two.
  std::map<std::string, Placement> split;
  auto add = [&](const std::vector<PlacementSeed>& seeds) {
    for (const PlacementSeed& s : seeds) split.emplace(s.value, s.placement);
  };
  // Convolutions are not Megatron's: they stay whole here, and are split
  // only where a search (plan/layer_search.h) or a strategy file places them.
  const std::vector<SplitUnit> units = split_units(graph);
  std::vector<bool> taken(units.size(), false);
  auto conv = [&](size_t u) { return units[u].layers.front().conv; };
  for (size_t u = 0; u < units.size(); ++u) {
    const SplitUnit& unit = units[u];
    if (unit.block()) {
      add(column_seeds(unit.layers[0], axis, unit.groups));
      add(row_seeds(unit.layers[1], axis));
    } else if (!taken[u] && !conv(u) && unit.next >= 0 && !taken[static_cast<size_t>(unit.next)] &&
               !conv(static_cast<size_t>(unit.next))) {
      add(column_seeds(unit.layers[0], axis));
      add(row_seeds(units[static_cast<size_t>(unit.next)].layers[0], axis));
      taken[static_cast<size_t>(unit.next)] = true;
    }
    taken[u] = true;
  }
  if (split.empty())
    fail("tensor parallelism: the model has no layer parallax knows how to split (a transformer block's attention "
         "or MLP, two fully-connected layers in a chain); use data parallelism");
  // A tied embedding (GPT-2's wte: the table of an embedding lookup that the
  // LM head also reads, as x·Wᵀ) is split by vocabulary rows: the lookup and the logits.
  std::set<ValueId> tables, heads;
  for (const Node& n : graph.nodes()) {
    if (n.origin >= 0 || n.inputs.size() != 2) continue;
    if (n.op() == "embedding") tables.insert(n.inputs[1]);
    if (n.op() == "matmul" && n.attrs.get_int("trans_b", 0) != 0) heads.insert(n.inputs[1]);
  }
  for (ValueId p : graph.params())
    if (tables.count(p) && heads.count(p)) split.emplace(graph.value(p).name, Placement::S(0));
  std::vector<PlacementSeed> seeds;
  for (ValueId p : graph.params())  // in parameter order, as strategy files list them
    if (auto it = split.find(graph.value(p).name); it != split.end()) seeds.push_back({it->first, axis, it->second});
  auto seed = [&](const std::string& name, Placement p) { seeds.push_back({name, axis, p}); };
  if (sequence_parallel) {
    // The residual stream, split along the sequence where it leaves the
    // embedding (the first block's residual input, above its dropout) and
    // where each block's row layer adds to it (its output, before the
    // reduction the split turns into a reduce-scatter).
    std::vector<ValueId> stream;
    for (const SplitUnit& unit : units) {
      if (!unit.block()) continue;
      if (stream.empty()) {
        ValueId v = unit.residual;
        while (graph.value(v).producer >= 0 && graph.nodes()[static_cast<size_t>(graph.value(v).producer)].op() == "dropout")
          v = graph.nodes()[static_cast<size_t>(graph.value(v).producer)].inputs.front();
        stream.push_back(v);
      }
      stream.push_back(unit.layers[1].output);
    }
    if (stream.empty())
      fail("sequence parallelism splits a transformer's residual stream along the sequence; this model has no "
           "transformer block (attention or MLP on a residual branch)");
    for (ValueId v : stream) {
      const Value& value = graph.value(v);
      if (value.spec.shape.rank() < 3)
        fail("sequence parallelism splits (batch, sequence, features) activations; '{}' is {}", value.name,
             value.spec.shape);
      seed(value.name, Placement::S(1));
    }
  }
  return seeds;
}

}  // namespace px::parallel
