// The OptCNN-style search: each unit tensor parallelism can split
// (parallel/split_units.h, found by the graph's structure: a lone
// fully-connected layer, "fc1", "fc2", ... of an MLP or an imported
// Gemm/MatMul; a convolution; a transformer block's attention or MLP) gets
// its own placement on the tensor axis of a mesh dp x tp, in forward
// order, and everything else (pooling, activations, norms) runs
// data-parallel along dp, whole along tp. A lone layer is placed
//
//   replicated  the weight whole on every tp rank
//   column      the weight's output features split (S(1); a conv's output
//               channels, S(0)), the bias S(0): the layer's output is split
//               by feature (a conv's by channel)
//   row         the input features split (S(0); a conv's input channels,
//               S(1)): the output is a partial sum every tp rank holds a
//               summand of
//
// and a block replicated or split as Megatron's pair (plan/layer_placement.h).
//
// For each tp a dynamic program over the chain picks the placements that
// minimize the layers' compute (a split layer computes 1/tp of it), their
// gradients' reduction along dp (a split weight reduces 1/tp of it) and
// the transitions between consecutive layers, forward and backward, as the
// resharding rule (parallel/lower/reshard.h) would run them: a split output
// gathered (allgather), a partial one summed (allreduce, or reduce-scatter
// into a row layer's split input). The layers' costs come from the
// estimator on the model lowered data-parallel over the mesh. The best
// placement of every mesh, and plain data parallelism, are then replayed on
// their Programs (plan/search.h evaluate): those figures rank them.
//
// With a large fully-connected layer and a slow link this finds what
// OptCNN did: the convolutions data-parallel (here: along dp, replicated
// along tp), the big layer split, so its gradient is never reduced whole.
#pragma once

#include <chrono>
#include <vector>

#include "plan/search.h"

namespace px::plan {

struct LayerSearch {
  const PlanRequest* request = nullptr;
  const CostEstimator* estimator = nullptr;
  const nn::Model* model = nullptr;
  int considered = 0;  // set by search_layers: placements weighed by the dynamic programs
  bool cut = false;    // set by search_layers: the deadline passed before every mesh was searched
};

// Replayed candidates, fastest first (empty when the model has no unit to split);
// those of the meshes searched before the deadline.
std::vector<Candidate> search_layers(LayerSearch& search, const Deadline& deadline);

}  // namespace px::plan
