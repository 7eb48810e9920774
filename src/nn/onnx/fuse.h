// The fusion pass: before conversion, subgraphs an exporter wrote out of
// small operators are rewritten to the one node parallax has a fused op
// for. LayerNorm as torch exports it below opset 17,
//   mean = ReduceMean(x, axes=[-1]); d = Sub(x, mean)
//   var = ReduceMean(Pow(d, 2), axes=[-1])
//   y = Add(Mul(Div(d, Sqrt(Add(var, eps))), weight), bias)
// becomes LayerNormalization(x, weight, bias, epsilon=eps, axis=-1), which
// imports as `layernorm`; and GELU's tanh form,
//   0.5 · (x · (1 + tanh(sqrt(2/pi) · (x + 0.044715 · (x · (x · x))))))
// becomes Gelu(x, approximate="tanh") (ONNX's opset-20 operator), which
// imports as `gelu`. A match must be exact (every intermediate read only
// inside the pattern, the constants as written); anything else is left as
// it is and converted node by node. And causal self-attention on a fused
// q|k|v (Split, Reshape and Transpose to heads, scaled q·kᵀ, a -inf
// causal Where, Softmax, ·v, Transpose back) becomes the node
// parallax.CausalSelfAttention, which imports as the fused `attention`.
#pragma once

#include <onnx/onnx_pb.h>

namespace px::nn {

// The domain of fused nodes no ONNX operator expresses.
inline constexpr const char* kFusedDomain = "parallax";

// Rewrites `graph` in place; returns the number of subgraphs fused.
int fuse_subgraphs(::onnx::GraphProto& graph);

}  // namespace px::nn
