#include "parallel/expert_parallel.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace px::parallel {
namespace {

// The ops that read an expert weight, as their input 1.
bool reads_expert_weight(const Node& node) { return node.op() == "moe_linear" || node.op() == "moe_bias_add"; }

}  // namespace

std::vector<PlacementSeed> expert_parallel_seeds(const Graph& graph, int ranks) {
  std::vector<PlacementSeed> seeds;
  std::set<ValueId> seeded;
  for (const Node& node : graph.nodes()) {
    if (!reads_expert_weight(node)) continue;
    const ValueId w = node.inputs[1];
    if (graph.value(w).kind != Value::Kind::param || !seeded.insert(w).second) continue;
    const int64_t experts = graph.spec(w).shape[0];
    if (experts < ranks)
      fail("expert parallelism: '{}' holds {} experts, fewer than the {} expert ranks (--ep): each rank needs a "
           "block of at least one expert",
           graph.value(w).name, experts, ranks);
    seeds.push_back({graph.value(w).name, std::string(kExpertAxis), Placement::S(0)});
  }
  if (seeds.empty())
    fail("expert parallelism (--ep {}): the model has no experts to spread over the ranks (a GPT needs "
         "--moe-experts)",
         ranks);
  return seeds;
}

void route_to_experts(Graph& graph) {
  std::vector<int> sites;
  for (size_t i = 0; i < graph.nodes().size(); ++i)
    if (graph.nodes()[i].origin < 0 && graph.nodes()[i].op() == "moe_expand") sites.push_back(static_cast<int>(i));
  // Later sites first: inserting nodes moves only those behind the insertion.
  for (auto site = sites.rbegin(); site != sites.rend(); ++site) {
    const Node expand = graph.nodes()[static_cast<size_t>(*site)];
    const ValueId copies = expand.outputs.front();
    // The layer: every node that reads the copies or what they make, up to
    // the combine; its routing is the choice the first expert op reads.
    std::set<ValueId> layer_values{copies};
    std::vector<int> layer_nodes;
    int combine = -1;
    ValueId choice = kNoValue, experts = kNoValue;
    for (int n = *site + 1; n < static_cast<int>(graph.nodes().size()) && combine < 0; ++n) {
      const Node& node = graph.nodes()[static_cast<size_t>(n)];
      if (std::none_of(node.inputs.begin(), node.inputs.end(), [&](ValueId v) { return layer_values.count(v) > 0; }))
        continue;
      if (node.op() == "moe_combine") {
        combine = n;
        continue;
      }
      if (node.op() == "moe_linear" && choice == kNoValue) {
        choice = node.inputs[2];
        experts = node.inputs[1];
      }
      layer_nodes.push_back(n);
      for (ValueId out : node.outputs) layer_values.insert(out);
    }
    if (combine < 0 || choice == kNoValue)
      fail("expert parallelism: the copies '{}' of moe_expand '{}' reach no moe_linear and moe_combine",
           graph.value(copies).name, expand.name);
    // The router's capacity rides along: the ranks check they drop alike.
    Attrs attrs{{"experts", graph.spec(experts).shape[0]}};
    if (const int router = graph.value(choice).producer; router >= 0)
      attrs.set("capacity_factor", graph.nodes()[static_cast<size_t>(router)].attrs.get_float("capacity_factor", 0.0));
    // The experts' output back to its tokens, just before the combine.
    const Node& combining = graph.nodes()[static_cast<size_t>(combine)];
    const ValueId experts_out = combining.inputs.front();
    const ValueId back =
        graph.insert_after(combine - 1, "moe_undispatch", {experts_out, choice}, attrs, expand.name + ".undispatch")
            .front();
    graph.set_input(combine + 1, 0, back);
    // The copies to their experts' ranks, right after they are made.
    const std::vector<ValueId> routed =
        graph.insert_after(*site, "moe_dispatch", {copies, choice}, attrs, expand.name + ".routed");
    for (int n : layer_nodes) {
      const int at = n + 1;  // behind the dispatch
      const Node& node = graph.nodes()[static_cast<size_t>(at)];
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        if (node.inputs[i] == copies) graph.set_input(at, i, routed[0]);
        else if (node.inputs[i] == choice) graph.set_input(at, i, routed[1]);
      }
    }
  }
}

}  // namespace px::parallel
