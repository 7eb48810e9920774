#include "parallel/context_parallel.h"

#include <set>

#include "core/error.h"

namespace px::parallel {
namespace {

// The forward attention nodes: qkv (B, T, 3, H, D) -> out (B, T, H, D).
std::vector<const Node*> attention_nodes(const Graph& graph) {
  std::vector<const Node*> out;
  for (const Node& n : graph.nodes())
    if (n.origin < 0 && n.op() == "attention") out.push_back(&n);
  return out;
}

// The nodes that read `v`.
std::vector<const Node*> readers(const Graph& graph, ValueId v) {
  std::vector<const Node*> out;
  for (const Node& n : graph.nodes())
    for (ValueId in : n.inputs)
      if (in == v) {
        out.push_back(&n);
        break;
      }
  return out;
}

}  // namespace

std::vector<PlacementSeed> context_parallel_seeds(const Graph& graph, const ContextOptions& options, int ranks) {
  const std::vector<const Node*> attention = attention_nodes(graph);
  if (attention.empty())
    fail("context parallelism splits sequences through attention; this model has no attention node (use data "
         "parallelism)");
  const Shape& qkv = graph.spec(attention.front()->inputs.front()).shape;
  const int64_t tokens = qkv[1];
  if (tokens < ranks)
    fail("context parallelism over '{}' of {} ranks: the sequence has {} tokens, fewer than the ranks (each rank "
         "needs a chunk)",
         options.axis, ranks, tokens);
  std::vector<PlacementSeed> seeds;
  // The sequence enters split: what a node makes from a batch input with
  // the sequence as dim 1 (the token embedding), so the batch inputs
  // themselves stay whole along the axis and are sliced there for free.
  std::set<ValueId> inputs(graph.inputs().begin(), graph.inputs().end());
  for (const Node& n : graph.nodes()) {
    if (n.origin >= 0) continue;
    bool reads_input = false;
    for (ValueId in : n.inputs) reads_input = reads_input || inputs.count(in) > 0;
    const Shape& out = graph.spec(n.outputs.front()).shape;
    if (reads_input && out.rank() >= 3 && out[1] == tokens)
      seeds.push_back({graph.value(n.outputs.front()).name, options.axis, Placement::S(1)});
  }
  if (seeds.empty())
    fail("context parallelism: no value of the model is made from its inputs with the sequence ({} tokens) as dim "
         "1, so there is nothing to split",
         tokens);
  for (const Node* n : attention) {
    const Shape& shape = graph.spec(n->inputs.front()).shape;
    const int64_t heads = shape[3];
    if (options.method == ContextMethod::all_to_all && heads % ranks != 0)
      fail("context parallelism --cp-method all-to-all scatters attention heads over '{}' of {} ranks; '{}' has {} "
           "heads, which {} does not divide (give a --cp that divides {})",
           options.axis, ranks, n->name, heads, ranks, heads);
    seeds.push_back({graph.value(n->outputs.front()).name, options.axis, Placement::S(2)});
    // Backward likewise: the gradient of q|k|v, merged back from heads,
    // split along the sequence before the q|k|v layer's weight and input
    // gradients (else the rule gathers it whole and the weight's gradient
    // comes out split by columns, not a summand).
    const int producer = graph.value(n->inputs.front()).producer;
    if (producer < 0) continue;
    const Node& split = graph.nodes()[static_cast<size_t>(producer)];
    if (split.op() == "reshape" && graph.spec(split.inputs.front()).shape.rank() >= 3)
      seeds.push_back({split.name + ".grad", options.axis, Placement::S(1)});
    // The heads merged back, split along the sequence again before the
    // output projection (else the rule would gather them whole).
    const std::vector<const Node*> next = readers(graph, n->outputs.front());
    if (next.size() == 1 && next.front()->op() == "reshape" &&
        graph.spec(next.front()->outputs.front()).shape.rank() >= 3)
      seeds.push_back({graph.value(next.front()->outputs.front()).name, options.axis, Placement::S(1)});
  }
  return seeds;
}

}  // namespace px::parallel
