// Megatron-LM's tensor parallelism as placement seeds on one mesh axis:
// where each parameter of a model is stored. The layers are found by the
// graph's structure (parallel/split_units.h), so a built-in model and an
// imported ONNX graph split alike. Everything else follows from
// propagation and the one resharding rule (lower/propagate.h): no
// collective is placed here.
//
//   transformer block  attention: the q|k|v layer column (S(out,3): each rank
//                      its heads of q, k and v), the output projection row
//                      (its bias whole, added after the reduction); MLP:
//                      the first layer column, the second row; LayerNorms whole
//   tied embedding     (GPT-2's wte: an embedding table the LM head reads as
//                      x·Wᵀ) vocabulary rows (S(0)): the lookup and the
//                      logits are split by vocabulary
//   layers in a chain  (an MLP's fc1, fc2, ...) column, row, column, row, ...;
//                      an odd last layer whole
//   convolutions       whole: a search or a strategy file may split them
//                      (column by output channel, row by input channel)
//
// "column" splits a weight's output features, "row" its input features:
// S(1) and S(0) of a (in, out) weight, S(0) and S(1) of torch's (out, in).
//
// Sequence parallelism (Korthikanti et al. 2022) also seeds the residual
// stream S(1) (split along the sequence) where it leaves the embedding and
// each row-parallel layer: LayerNorm, dropout and the residual adds run on
// sequence shards, and the row layers' allreduces become reduce-scatters
// before them and all-gathers after.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "parallel/strategy.h"

namespace px::parallel {

// px::Error when the model has no layer these rules split, or (sequence
// parallelism) no sequence dim.
std::vector<PlacementSeed> megatron_seeds(const Graph& graph, const std::string& axis, bool sequence_parallel);

// The mesh {dp, tp} they go on: tensor_parallel() in parallel/compose.h.

}  // namespace px::parallel
