// Pipeline stages: which (virtual) stage runs each node of a graph with
// its backward. The forward nodes, in their topological (insertion)
// order, are cut into contiguous runs, one per stage; a backward node runs
// on the stage of its forward origin (Node::origin). The values that cross
// a cut are the activations stage k sends to stage k + 1 in forward, and
// their gradients the gradients it receives back.
//
// Cuts go where the fewest bytes cross (for the GPT: between transformer
// blocks or after an attention's residual add, where only the residual
// stream (B, T, C) crosses), balanced by the ops' costs, or before the
// layers the user names (--stage-cuts h.2,h.4).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace px::parallel {

struct StageAssignment {
  int stages = 1;
  std::vector<int> first_node;     // per stage: its first forward node
  std::vector<int> stage_of_node;  // every node of the graph
  // Per cut k (between stages k and k + 1): the forward values made on
  // stages ≤ k and read on stages > k by any node (stage_crossings over
  // every node). Inputs and parameters are not among them: every stage
  // reads its own.
  std::vector<std::vector<ValueId>> crossing;
  // Parameters read on more than one stage (GPT's tied wte: the embedding
  // on the first, the LM head on the last), with those stages: their
  // gradients are summed across them before the update.
  std::vector<std::pair<ValueId, std::vector<int>>> shared_params;
  double cost_of_stage(int stage) const { return cost[static_cast<size_t>(stage)]; }
  std::vector<double> cost;  // per stage: its nodes' flops + bytes moved, forward and backward
};

// The values crossing each cut k (between stages k and k + 1) when
// `nodes` run: forward values made on stages ≤ k and read on later ones
// (sent forward), backward values made on stages > k and read on earlier
// ones (sent back), each in value order. px::Error for a forward value read
// on an earlier stage or a backward one read on a later stage.
struct StageCrossings {
  std::vector<std::vector<ValueId>> forward, backward;
};
StageCrossings stage_crossings(const Graph& graph, int forward_nodes, const std::vector<int>& stage_of_node,
                               int stages, const std::vector<int>& nodes);

// The stage of every node given where each stage starts (first_node[0] ==
// 0, increasing, each below forward_nodes). px::Error on bad starts.
StageAssignment assign_stages(const Graph& graph, int forward_nodes, const std::vector<int>& first_node);

// Starts for `stages` stages balanced by cost among the narrowest cuts
// (those where the fewest bytes cross); px::Error when the graph has fewer
// such cuts than stages − 1. With `speeds` (one per stage, > 0: stages on
// devices of different speeds), a stage's cost is over its speed, so a
// slower stage gets less of the graph.
std::vector<int> balanced_stage_starts(const Graph& graph, int forward_nodes, int stages,
                                       std::span<const double> speeds = {});

// Starts before the first forward node of each named layer scope ("h.2"
// starts at the first node named "h.2." or "h.2"); px::Error naming an
// unknown layer, or layers out of order.
std::vector<int> stage_starts_at(const Graph& graph, int forward_nodes, const std::vector<std::string>& layers);

}  // namespace px::parallel
