// Layer helpers shared by the model builders: each adds its parameters
// (named "<scope>.weight", "<scope>.bias") and nodes to the graph.
#pragma once

#include <string>

#include "graph/graph.h"

namespace px::nn {

// A linear layer is two nodes, `linear` (x · w) and `bias_add`.
// torch.nn.Linear-initialized linear layer (uniform within 1/sqrt(in)); w (in, out).
ValueId torch_linear(Graph& g, const std::string& name, ValueId x, int64_t in, int64_t out);
// GPT-2-initialized linear layer: w ~ N(0, std), bias zero; w (in, out).
ValueId gpt_linear(Graph& g, const std::string& name, ValueId x, int64_t in, int64_t out, double std);
// LayerNorm with weight 1, bias 0.
ValueId layer_norm(Graph& g, const std::string& name, ValueId x, int64_t width);
// Mean cross-entropy of logits (N, classes) against labels (N).
ValueId classification_loss(Graph& g, ValueId logits, ValueId labels, int64_t batch);

}  // namespace px::nn
