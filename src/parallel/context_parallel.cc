#include "parallel/context_parallel.h"

#include <set>

#include "core/error.h"
#include "parallel/split_units.h"

namespace px::parallel {
namespace {

// The forward attention nodes: qkv (B, T, 3, H, D) -> out (B, T, H, D).
std::vector<const Node*> attention_nodes(const Graph& graph) {
  std::vector<const Node*> out;
  for (const Node& n : graph.nodes())
    if (n.origin < 0 && n.op() == "attention") out.push_back(&n);
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
  const bool zigzag = options.method == ContextMethod::ring && options.balance;
  const Placement sequence = zigzag ? Placement::Z(1) : Placement::S(1);
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
      seeds.push_back({graph.value(n.outputs.front()).name, options.axis, sequence});
  }
  if (seeds.empty())
    fail("context parallelism: no value of the model is made from its inputs with the sequence ({} tokens) as dim "
         "1, so there is nothing to split",
         tokens);
  // The ring keeps every value split along the sequence: nothing else to seed.
  if (options.method == ContextMethod::ring) return seeds;
  const std::vector<std::vector<int>> readers = forward_readers(graph);
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
    const std::vector<int>& next = readers[static_cast<size_t>(n->outputs.front())];
    const Node* merge = next.size() == 1 ? &graph.nodes()[static_cast<size_t>(next.front())] : nullptr;
    if (merge != nullptr && merge->op() == "reshape" && graph.spec(merge->outputs.front()).shape.rank() >= 3)
      seeds.push_back({graph.value(merge->outputs.front()).name, options.axis, Placement::S(1)});
  }
  return seeds;
}

void ring_attention(Graph& graph, int parts, bool balanced) {
  std::vector<int> sites;
  for (size_t i = 0; i < graph.nodes().size(); ++i)
    if (graph.nodes()[i].origin < 0 && graph.nodes()[i].op() == "attention") sites.push_back(static_cast<int>(i));
  // Later sites first: inserting nodes moves only those behind the insertion.
  for (auto site = sites.rbegin(); site != sites.rend(); ++site) {
    const Node attention = graph.nodes()[static_cast<size_t>(*site)];
    // The ring's blocks are causal by position (kernels/block_attention.h).
    if (attention.attrs.get_int("causal", 1) == 0)
      throw Error(fmt::format("--cp-method ring: attention '{}' is not causal (causal=0), and the ring's blocks are; "
                              "use --cp-method all-to-all, which keeps each head's attention whole",
                              attention.name));
    const ValueId qkv = attention.inputs.front(), out = attention.outputs.front();
    const int64_t tokens = graph.spec(qkv).shape[1];
    int at = *site;
    auto add = [&](const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs,
                   const std::string& what) { return graph.insert_after(at++, op, inputs, attrs, attention.name + "." + what); };
    const Attrs blocking{{"tokens", tokens}, {"parts", int64_t{parts}}, {"balanced", int64_t{balanced ? 1 : 0}}};
    const ValueId blocked = add("to_blocks", {qkv}, blocking, "blocks").front();
    ValueId kv = add("narrow", {blocked}, {{"dim", int64_t{3}}, {"start", int64_t{1}}, {"length", int64_t{2}}}, "kv").front();
    std::vector<ValueId> outs, lses;
    for (int j = 0; j < parts; ++j) {
      // The next block is asked for before this one is used: its transfer
      // overlaps this block's attention.
      const ValueId next = j + 1 < parts ? add("ring_shift", {kv}, {{"step", int64_t{1}}}, fmt::format("kv{}", j + 1)).front()
                                         : kNoValue;
      Attrs attrs = blocking;
      attrs.set("shift", int64_t{j});
      const std::vector<ValueId> part = add("block_attention", {blocked, kv}, attrs, fmt::format("block{}", j));
      outs.push_back(part[0]);
      lses.push_back(part[1]);
      kv = next;
    }
    std::vector<ValueId> merged_inputs = outs;
    merged_inputs.insert(merged_inputs.end(), lses.begin(), lses.end());
    const ValueId merged = add("merge_attention", merged_inputs, {}, "merge").front();
    const ValueId whole = add("from_blocks", {merged}, blocking, "out").front();
    // Every reader of attention's output reads the ring's.
    for (int n = at + 1; n < static_cast<int>(graph.nodes().size()); ++n)
      for (size_t i = 0; i < graph.nodes()[static_cast<size_t>(n)].inputs.size(); ++i)
        if (graph.nodes()[static_cast<size_t>(n)].inputs[i] == out) graph.set_input(n, i, whole);
    for (const auto& [name, value] : graph.outputs())
      PX_CHECK(value != out, "ring attention: graph output '{}' is attention's output", name);
  }
}

}  // namespace px::parallel
