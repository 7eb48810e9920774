// The operators imported as graph nodes: each ONNX node that does not fold
// (fold.h) becomes one or a few of parallax's ops, e.g. Gemm(x, W, b,
// transB=1) -> matmul(x, W, trans_b) + bias_add. Attribute values parallax's
// ops cannot express are refused by name, never approximated.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "nn/onnx/import_context.h"

namespace px::nn {

using Converter = std::function<void(ImportContext&, const ::onnx::NodeProto&)>;

// The name of input `i` of `node` (the converters' shorthand).
inline std::string in(const ::onnx::NodeProto& node, int i) { return ImportContext::input(node, i); }

// The converters of the operators a GPT-style transformer exports to
// (convert_transformer.cc): Gather, LayerNormalization, Transpose, Split,
// Softmax, Mul, Sub, Erf, Where (a causal mask), batched MatMul.
const std::map<std::string, Converter>& transformer_converters();
// Sqrt, Pow, Div, ReduceMean, and Cast, Slice and Concat of computed
// values (convert_math.cc).
const std::map<std::string, Converter>& math_converters();
// What an operator parallax refuses on purpose is, why, and what to do
// instead (the loader names the node with it); nullopt for the others.
std::optional<std::string> refused_operator(const std::string& op_type);
// The converters of the fusion pass's own nodes (domain kFusedDomain, fuse.h).
const std::map<std::string, Converter>& fused_converters();
// An Add, Mul, Div or Sub with a scalar constant operand as an affine
// node (y = scale·x + shift); false when neither operand is a constant.
bool convert_scalar_arithmetic(ImportContext& context, const ::onnx::NodeProto& node);

std::vector<std::string> converted_operators();
// Adds `node` to the context's graph and defines its outputs. px::Error
// naming the node for attributes or inputs it does not take.
void convert_node(ImportContext& context, const ::onnx::NodeProto& node);

}  // namespace px::nn
