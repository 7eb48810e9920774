// Megatron-LM's tensor parallelism as placement seeds on one mesh axis:
// where each parameter of a model is stored, by its GPT-2 (or MLP) name.
// Everything else follows from propagation and the one resharding rule
// (lower/propagate.h): no collective is placed here.
//
//   GPT block:  attn.c_attn  column (S(1,3): each rank its heads of q, k and v)
//               attn.c_proj  row (S(0)); its bias whole, added after the reduction
//               mlp.c_fc     column (S(1)), mlp.c_proj row (S(0))
//               LayerNorms   whole
//   GPT:        wte          vocabulary rows (S(0)): the embedding's lookup and
//                            the tied LM head's logits are split by vocabulary
//   MLP:        fc1 column, fc2 row, fc3 column, fc4 row, ...; an odd last layer whole
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
