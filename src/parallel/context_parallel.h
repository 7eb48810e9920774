// Context parallelism (Strategy::context) as placement seeds on one mesh
// axis: where the sequence is split. Everything else follows from
// propagation and the one resharding rule (lower/propagate.h), as for
// tensor parallelism: no collective is placed here.
//
//   the sequence   the first values with a sequence dim, made from the
//                  batch inputs (the GPT's token embedding): S(1), so the
//                  residual stream, LayerNorms, MLPs and the loss run on
//                  each rank's chunk of the tokens, the position table's
//                  rows sliced to the chunk's positions
//   attention      all-to-all (DeepSpeed-Ulysses): its output S(2), its
//                  heads, so q|k|v arrive by an all-to-all S(1) -> S(3)
//                  (each rank all the tokens of its heads) and the causal
//                  mask sees whole sequences; the merged heads after it
//                  S(1) again, the inverse all-to-all; backward the same
//                  (the gradient of q|k|v, "<split>.grad", S(1), so the
//                  q|k|v layer's weight gradient is a summand)
//
// Weights stay whole (B) along the axis; their gradients come out P and
// join the data axis' reduction (parallel/lower.h: the data path over data
// x context ranks).
#pragma once

#include <vector>

#include "graph/graph.h"
#include "parallel/strategy.h"

namespace px::parallel {

// px::Error when the model has no attention (nothing to split the
// sequence of), no sequence dim made from its inputs, or (all-to-all) a
// head count `ranks` does not divide.
std::vector<PlacementSeed> context_parallel_seeds(const Graph& graph, const ContextOptions& options, int ranks);

}  // namespace px::parallel
