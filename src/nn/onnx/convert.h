// The operators imported as graph nodes: each ONNX node that does not fold
// (fold.h) becomes one or a few of parallax's ops, e.g. Gemm(x, W, b,
// transB=1) -> matmul(x, W, trans_b) + bias_add. Attribute values parallax's
// ops cannot express are refused by name, never approximated.
#pragma once

#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "nn/onnx/import_context.h"

namespace px::nn {

std::vector<std::string> converted_operators();
// Adds `node` to the context's graph and defines its outputs. px::Error
// naming the node for attributes or inputs it does not take.
void convert_node(ImportContext& context, const ::onnx::NodeProto& node);

}  // namespace px::nn
