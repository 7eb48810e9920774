// The fusion pass: before conversion, subgraphs an exporter wrote out of
// small operators are rewritten to the one node parallax has a fused op
// for. Today: LayerNorm as torch exports it below opset 17,
//   mean = ReduceMean(x, axes=[-1]); d = Sub(x, mean)
//   var = ReduceMean(Pow(d, 2), axes=[-1])
//   y = Add(Mul(Div(d, Sqrt(Add(var, eps))), weight), bias)
// becomes LayerNormalization(x, weight, bias, epsilon=eps, axis=-1), which
// imports as `layernorm`. A match must be exact (every intermediate read
// only inside the pattern, the constants 2 and a scalar eps); anything else
// is left as it is and converted node by node.
#pragma once

#include <onnx/onnx_pb.h>

namespace px::nn {

// Rewrites `graph` in place; returns the number of subgraphs fused.
int fuse_layer_norms(::onnx::GraphProto& graph);

}  // namespace px::nn
