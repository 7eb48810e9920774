// What every constant folder shares (fold.cc: the shape operators;
// fold_broadcast.cc: the elementwise ones, with numpy broadcasting): the
// type of a folder, reading a folded input and making a folded output
// (checked before allocation). Internal to the importer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "nn/onnx/import_context.h"

namespace px::nn::folding {

using Outputs = std::vector<Tensor>;
using FoldFn = std::function<Outputs(ImportContext&, const ::onnx::NodeProto&)>;

// Element `i` of `src` into element `j` of `dst` (same dtype).
void copy_element(const Tensor& src, int64_t i, Tensor& dst, int64_t j);
// Element `i` of an f32 or i64 constant.
double number(const Tensor& t, int64_t i);
// A float constant read as an integer (a shape, an index): it must be a
// finite value in int64's range.
int64_t integer_of(float v, const std::string& where);
int64_t integer_of(float v, const ::onnx::NodeProto& node);
// Axis `a` of a rank-`rank` tensor, negative counting from the end.
int axis_of(int64_t a, int rank, const ::onnx::NodeProto& node);
// Input `i` of `node`, a constant.
const Tensor& folded_input(ImportContext& c, const ::onnx::NodeProto& node, int i);
// The output of `node`, shaped `dims`, checked before allocation: folding
// makes small tensors (shape arithmetic, causal masks up to a few
// thousand tokens square), so past kMaxFoldedElements it is a malformed model.
inline constexpr int64_t kMaxFoldedElements = int64_t{1} << 26;
Tensor folded_output(const std::vector<int64_t>& dims, DType dtype, const ::onnx::NodeProto& node);

// The elementwise folders (fold_broadcast.cc): Add, Sub, Mul, Div;
// Equal, Less, LessOrEqual, Greater, GreaterOrEqual; Not; Where; Expand.
Outputs fold_arithmetic(ImportContext& c, const ::onnx::NodeProto& node);
Outputs fold_comparison(ImportContext& c, const ::onnx::NodeProto& node);
Outputs fold_not(ImportContext& c, const ::onnx::NodeProto& node);
Outputs fold_where(ImportContext& c, const ::onnx::NodeProto& node);
Outputs fold_expand(ImportContext& c, const ::onnx::NodeProto& node);

}  // namespace px::nn::folding
