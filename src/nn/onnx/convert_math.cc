// Elementwise math and data movement on computed values, for graphs the
// fusion pass (fuse.h) leaves node by node (a norm or GELU written out a
// little differently), and the operators parallax refuses by name.
//   Sqrt(x)                               -> sqrt
//   Pow(x, p), p a scalar constant        -> pow (exponent p)
//   ReduceMean(x, axes=[last], keepdims)  -> reduce_mean (then a reshape without keepdims)
//   Cast(x, to)                           -> the value itself, when `to` is stored as x is
//                                            (float -> float, int -> int)
//   Slice(x, starts, ends, [axes], [steps]) of a computed x, one axis, step 1 -> narrow
//   Concat(x0, x1, ..., axis) of computed values -> concat
//   BatchNormalization                    -> refused by name, with what to do (refused_operator)
#include <algorithm>
#include <optional>

#include "core/error.h"
#include "nn/onnx/convert.h"
#include "nn/onnx/fold.h"
#include "nn/onnx/tensors.h"

namespace px::nn {
namespace {

using ::onnx::NodeProto;

int axis_index(const NodeProto& node, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) fail("{}: axis {} outside rank {}", describe(node), axis, rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

void convert_sqrt(ImportContext& c, const NodeProto& node) {
  c.define(node.output(0), c.graph().add1("sqrt", {c.value(in(node, 0), node)}, {}, ImportContext::node_name(node)));
}

void convert_pow(ImportContext& c, const NodeProto& node) {
  if (!c.is_constant(in(node, 1)))
    fail("{}: the exponent is computed from the data; parallax imports Pow by a scalar constant", describe(node));
  const Tensor& p = c.constant(in(node, 1), node);
  if (p.numel() != 1) fail("{}: exponent of shape {}; parallax imports Pow by a scalar constant", describe(node), p.shape());
  const double exponent = p.dtype() == DType::f32 ? p.f32()[0] : static_cast<double>(constant_ints(p)[0]);
  c.define(node.output(0), c.graph().add1("pow", {c.value(in(node, 0), node)}, {{"exponent", exponent}},
                                          ImportContext::node_name(node)));
}

// ReduceMean over the last axis: axes as an attribute (opset 13-17).
void convert_reduce_mean(ImportContext& c, const NodeProto& node) {
  const ValueId x = c.value(in(node, 0), node);
  const Shape s = c.graph().spec(x).shape;
  const std::optional<std::vector<int64_t>> axes = attr_ints(node, "axes");
  if (!axes || axes->size() != 1 || axis_index(node, (*axes)[0], s.rank()) != s.rank() - 1)
    fail("{}: axes {}: parallax imports ReduceMean over the last axis only (a norm's mean)", describe(node),
         axes ? fmt::format("[{}]", fmt::join(*axes, ",")) : "absent (every axis)");
  const std::string name = ImportContext::node_name(node);
  ValueId y = c.graph().add1("reduce_mean", {x}, {}, name);  // (R..., 1)
  if (attr_int(node, "keepdims", 1) == 0) {
    std::vector<int64_t> dims(s.dims().begin(), s.dims().end() - 1);
    if (!dims.empty()) dims[0] = -1;  // the rows stay batch-relative
    y = c.graph().add1("reshape", {y}, {{"shape", dims}}, name + ".squeeze");
  }
  c.define(node.output(0), y);
}

// Cast of a computed value: parallax computes in float32 and keeps ids as
// integers, so a cast within one kind changes nothing; across kinds it
// would change the values, and is refused.
void convert_cast(ImportContext& c, const NodeProto& node) {
  const ValueId x = c.value(in(node, 0), node);
  const DType from = c.graph().spec(x).dtype;
  const int64_t to = attr_int(node, "to", 0);
  using ::onnx::TensorProto;
  const bool to_float = to == TensorProto::FLOAT || to == TensorProto::DOUBLE || to == TensorProto::FLOAT16 ||
                        to == TensorProto::BFLOAT16;
  const bool to_int = to == TensorProto::INT32 || to == TensorProto::INT64;
  const bool from_float = from == DType::f32, from_int = from == DType::i32 || from == DType::i64;
  if (!((to_float && from_float) || (to_int && from_int)))
    fail("{}: a cast of a computed {} value to ONNX type {}; parallax casts within floats or within integers "
         "only (a float-to-int cast of data has no gradient to train through)",
         describe(node), dtype_name(from), to);
  c.define(node.output(0), x);
}

// Slice of a computed value along one axis with step 1: narrow.
void convert_slice(ImportContext& c, const NodeProto& node) {
  const ValueId x = c.value(in(node, 0), node);
  const Shape s = c.graph().spec(x).shape;
  for (int i = 1; i <= 4; ++i)
    if (!in(node, i).empty() && !c.is_constant(in(node, i)))
      fail("{}: input {} is computed from the data; parallax imports Slice with constant starts, ends, axes and "
           "steps", describe(node), i);
  const std::vector<int64_t> starts = constant_ints(c.constant(in(node, 1), node)),
                             ends = constant_ints(c.constant(in(node, 2), node));
  std::vector<int64_t> axes{0}, steps{1};
  if (!in(node, 3).empty()) axes = constant_ints(c.constant(in(node, 3), node));
  if (!in(node, 4).empty()) steps = constant_ints(c.constant(in(node, 4), node));
  if (starts.size() != 1 || ends.size() != 1 || axes.size() != 1 || steps.size() != 1 || steps[0] != 1)
    fail("{}: parallax imports Slice of a computed value along one axis with step 1", describe(node));
  const int axis = axis_index(node, axes[0], s.rank());
  if (axis == 0) fail("{}: slicing the batch dim of a computed value is not supported", describe(node));
  const int64_t n = s[axis];
  auto clamp = [n](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
  const int64_t begin = clamp(starts[0]), end = clamp(ends[0]);
  if (end <= begin) fail("{}: an empty slice [{}, {}) of dim {}", describe(node), begin, end, n);
  c.define(node.output(0), c.graph().add1("narrow", {x}, {{"dim", int64_t{axis}}, {"start", begin}, {"length", end - begin}},
                                          ImportContext::node_name(node)));
}

// Concat of computed values (every input a graph value): concat.
void convert_concat(ImportContext& c, const NodeProto& node) {
  std::vector<ValueId> inputs;
  for (int i = 0; i < node.input_size(); ++i) inputs.push_back(c.value(in(node, i), node));
  const int rank = c.graph().spec(inputs.front()).shape.rank();
  const int axis = axis_index(node, attr_int(node, "axis", 0), rank);
  c.define(node.output(0), c.graph().add1("concat", inputs, {{"dim", int64_t{axis}}}, ImportContext::node_name(node)));
}

}  // namespace

const std::map<std::string, Converter>& math_converters() {
  static const std::map<std::string, Converter> table{
      {"Sqrt", convert_sqrt}, {"Pow", convert_pow},     {"ReduceMean", convert_reduce_mean},
      {"Cast", convert_cast}, {"Slice", convert_slice},   {"Concat", convert_concat}};
  return table;
}

std::optional<std::string> refused_operator(const std::string& op_type) {
  if (op_type == "BatchNormalization")
    return "batch normalization, which normalizes with statistics of each batch (and keeps running ones); "
           "parallax does not train it, since a batch split across ranks would change every result. Export "
           "the model for inference (model.eval() with do_constant_folding=True folds each BatchNorm into the "
           "Conv before it) to fine-tune without it, or replace it by LayerNorm or GroupNorm before exporting";
  return std::nullopt;
}

}  // namespace px::nn
