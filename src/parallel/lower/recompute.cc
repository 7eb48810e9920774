// recompute: activation recomputation as a rewrite of the phases.
//
// Forward nodes are grouped into segments: under `full`, each layer (a
// contiguous run of forward nodes in one scope "h.<i>", GPT's blocks);
// under `selective`, each attention core (an `attention` node; Korthikanti
// et al. 2022, whose kernels kept the T x T probabilities: ours keeps out
// and lse, kernels/attention.h, so selective drops only the lse). Context parallelism's ring attention is in no segment
// (LightSeq's rematerialisation-aware checkpointing): its backward makes
// the softmax again from the kept lse (kernels/block_attention.h), so its
// outputs are kept and a recomputed layer does not run the ring again —
// and selective has nothing to drop there. A segment's *dropped* values are those it makes that
// backward reads but no forward node outside it does: the layer's input
// and output stay, everything inside is freed after its last forward read
// (liveness ends a value's first instance there). Before the first
// backward node of a micro-batch that reads a dropped value, the nodes of
// the segment that make them run again (and what they need from inside
// the segment). Recomputed values are bitwise the first ones: kernels are
// deterministic and dropout masks depend only on the step seed and the
// rows' global positions.
#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "parallel/lower/passes.h"

namespace px::parallel::passes {
namespace {

// "h.3" for a node named "h.3.attn.qkv": a scope whose second part is a
// layer index; "" for nodes outside any layer (embeddings, the head).
std::string layer_of(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos || dot == 0) return {};
  const size_t end = name.find('.', dot + 1);
  const std::string index = name.substr(dot + 1, end == std::string::npos ? std::string::npos : end - dot - 1);
  if (index.empty() || !std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return {};
  return name.substr(0, end);
}

// A node of the ring's attention core (parallel::ring_attention): its
// outputs are kept, never recomputed.
bool ring_core(const Graph& graph, const Node& node) {
  static const std::set<std::string> core{"to_blocks", "ring_shift", "block_attention", "merge_attention",
                                          "from_blocks"};
  if (core.count(node.op()) > 0) return true;
  if (node.op() != "narrow") return false;
  const int producer = graph.value(node.inputs.front()).producer;
  return producer >= 0 && graph.nodes()[static_cast<size_t>(producer)].op() == "to_blocks";
}

// Segments of forward nodes recomputed together, in forward order.
std::vector<std::vector<int>> segments(const Graph& graph, int forward_nodes, Recompute mode) {
  std::vector<std::vector<int>> out;
  std::string current;
  for (int n = 0; n < forward_nodes; ++n) {
    const Node& node = graph.nodes()[static_cast<size_t>(n)];
    if (ring_core(graph, node)) continue;
    if (mode == Recompute::selective) {
      if (node.op() == "attention") out.push_back({n});
      continue;
    }
    const std::string layer = layer_of(node.name);
    if (layer.empty()) {
      current.clear();
      continue;
    }
    if (layer != current) out.emplace_back();
    current = layer;
    out.back().push_back(n);
  }
  return out;
}

}  // namespace

void recompute(const Context& c, RankWork& work) {
  const Recompute mode = c.strategy.lowering.recompute;
  if (mode == Recompute::none) return;
  const Graph& graph = c.graph;
  std::set<int> running;  // nodes this rank runs
  for (const Phase& phase : work.phases)
    for (int n : phase.nodes) running.insert(n);
  std::vector<std::vector<int>> readers(graph.values().size());
  for (int n : running)
    for (ValueId v : graph.nodes()[static_cast<size_t>(n)].inputs) readers[static_cast<size_t>(v)].push_back(n);

  // Per segment: the nodes to run again; per dropped value: its segment.
  std::vector<std::vector<int>> rerun;
  std::map<ValueId, int> segment_of_dropped;
  for (std::vector<int> segment : segments(graph, c.forward_nodes, mode)) {
    std::erase_if(segment, [&](int n) { return !running.count(n); });
    const std::set<int> inside(segment.begin(), segment.end());
    std::set<ValueId> dropped;
    for (int n : segment)
      for (ValueId v : graph.nodes()[static_cast<size_t>(n)].outputs) {
        bool backward = false, outside = v == c.loss;
        for (int r : readers[static_cast<size_t>(v)]) {
          backward = backward || r >= c.forward_nodes;
          outside = outside || (r < c.forward_nodes && !inside.count(r));
        }
        if (backward && !outside) dropped.insert(v);
      }
    if (dropped.empty()) continue;
    // The segment's nodes that make a dropped value, and what they need from inside it.
    std::set<ValueId> need(dropped.begin(), dropped.end());
    std::vector<int> nodes;
    for (auto it = segment.rbegin(); it != segment.rend(); ++it) {
      const Node& node = graph.nodes()[static_cast<size_t>(*it)];
      if (std::none_of(node.outputs.begin(), node.outputs.end(), [&](ValueId v) { return need.count(v) > 0; })) continue;
      nodes.push_back(*it);
      for (ValueId in : node.inputs) need.insert(in);
    }
    std::reverse(nodes.begin(), nodes.end());
    for (ValueId v : dropped) segment_of_dropped[v] = static_cast<int>(rerun.size());
    rerun.push_back(std::move(nodes));
  }

  std::set<std::pair<int, int>> done;  // (micro-batch, segment) recomputed
  for (Phase& phase : work.phases) {
    if (!phase.backward) continue;
    std::vector<int> nodes;
    for (int n : phase.nodes) {
      for (ValueId in : graph.nodes()[static_cast<size_t>(n)].inputs) {
        auto it = segment_of_dropped.find(in);
        if (it == segment_of_dropped.end() || !done.insert({phase.micro, it->second}).second) continue;
        const std::vector<int>& again = rerun[static_cast<size_t>(it->second)];
        nodes.insert(nodes.end(), again.begin(), again.end());
      }
      nodes.push_back(n);
    }
    phase.nodes = std::move(nodes);
  }
}

}  // namespace px::parallel::passes
