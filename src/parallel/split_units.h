// The layers of a model that tensor parallelism can split, found by the
// graph's structure rather than by layer names, so that a built-in model
// and an imported ONNX graph are treated alike (`--tp`, the layer-wise
// and MCMC searches, parallel/tensor_parallel.h and plan/layer_placement.h).
//
//   GEMM layer  a `linear` (x·W, W (K, M)) or `matmul` with trans_b
//               (x·Wᵀ, W (M, K): torch's Gemm) whose weight is a parameter
//               read by nothing else, directly or through a `transpose`
//               (torch's MatMul of W.t()); with the `bias_add` of a
//               parameter after it when there is one. A `conv2d` whose
//               weight (Co, Ci, Kh, Kw) and bias are parameters read by
//               nothing else is one too (an im2col GEMM): its features
//               are channels, dim 1 of its (N, C, H, W) activations.
//   block       Megatron's column-then-row pair: a GEMM layer whose output
//               reaches exactly one other GEMM layer through a region that
//               nothing outside reads (GELU's nodes; the attention's
//               reshapes and core), on a residual branch (the row layer's
//               output is added to what the column layer's input was made
//               from): a transformer's attention or MLP.
//   lone layer  any other GEMM layer (every conv layer).
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "parallel/strategy.h"

namespace px::parallel {

struct GemmLayer {
  std::string name;    // the weight's name without ".weight": "fc1", "h.0.attn.c_attn", "h.0.c_fc"
  int node = -1;       // the GEMM node
  std::string weight;  // its parameter
  int out_dim = 1;     // the weight's dim of output features: 1 for (K, M), 0 for torch's (M, K) and a conv's
  std::string bias;    // the bias_add's parameter (a conv's own bias), "" when none
  ValueId input = -1;  // the activations it reads (K features on the last dim; a conv's channels on dim 1)
  ValueId output = -1; // after the bias when there is one (M features on the last dim; a conv's on dim 1)
  bool conv = false;   // a conv2d
  std::vector<int> nodes;  // its forward nodes: the weight's transpose, the GEMM, the bias_add
};

struct SplitUnit {
  std::string name;              // a lone layer's name; a block's scope and its kind: "h.0.attn", "h.1.mlp"
  std::vector<GemmLayer> layers; // one (lone) or two (a block: column, then row)
  int groups = 1;                // a block's column output as groups: 3 when attention reads it as q|k|v
  std::vector<int> nodes;        // the forward nodes it owns, in graph order (costs are counted by them)
  ValueId residual = kNoValue;   // a block: the residual stream its row layer's output is added to
  int next = -1;                 // a lone layer: the lone unit its output reaches through a region nothing
                                 // else reads (an MLP's next layer, past its relu), -1 if none
  bool block() const { return layers.size() == 2; }
};

// Per value, the forward nodes that read it (each once; backward nodes and
// reshards left out).
std::vector<std::vector<int>> forward_readers(const Graph& graph);

// The graph's units in forward order; backward nodes (origin >= 0) and
// reshards are ignored, so a lowered graph gives the same units as its
// forward graph.
std::vector<SplitUnit> split_units(const Graph& graph);

// Megatron's splits of one layer along `axis`: column (output features
// split, in `groups` groups; the bias too) and row (input features; the
// bias stays whole, added after the reduction, or by a conv's shard of
// input channel 0).
std::vector<PlacementSeed> column_seeds(const GemmLayer& layer, const std::string& axis, int groups = 1);
std::vector<PlacementSeed> row_seeds(const GemmLayer& layer, const std::string& axis);

}  // namespace px::parallel
