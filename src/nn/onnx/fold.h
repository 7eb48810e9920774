// Constant folding at import. Shapes are static once the inputs are bound
// (the batch, and a symbolic sequence length: binding.h), so what torch
// exports to compute them from the data (Shape, Gather, Unsqueeze, Concat,
// ... feeding a Reshape; Range, Expand, comparisons, Trilu and Where making
// positions and causal masks from the input's length) is evaluated here,
// never run. Constant nodes, and nodes whose inputs are all constants, fold
// as well.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "nn/onnx/import_context.h"

namespace px::nn {

// The operators folding knows.
std::vector<std::string> foldable_operators();
// `node`'s outputs if it folds here (a Shape of any known value; any other
// foldable op whose inputs are all constants), else nullopt. px::Error
// naming the node for inputs it cannot fold (an out-of-range index, ...).
std::optional<std::vector<Tensor>> try_fold(ImportContext& context, const ::onnx::NodeProto& node);

// A constant's elements as integers (i64, or f32 truncated).
std::vector<int64_t> constant_ints(const Tensor& t);

}  // namespace px::nn
