// Elementwise math and data movement on computed values, for graphs the
// fusion pass (fuse.h) leaves node by node (a norm or GELU written out a
// little differently), and the operators parallax refuses by name.
//   Sqrt(x)                               -> sqrt
//   Pow(x, p), p a scalar constant        -> pow (exponent p)
//   Div(a, b) of two values               -> div (b a's shape or a's with a last dim of 1)
//   Div(k, x), k a scalar constant        -> pow (exponent -1), then affine (scale k) unless k = 1
//   Reciprocal(x)                         -> pow (exponent -1) (torch writes 1.0 / x so)
//   ReduceMean(x, axes, keepdims)         -> a reduce_mean per axis but the batch's (then a
//                                            reshape without keepdims); over every axis as the
//                                            graph's loss output: sum_leading, affine (1/elements)
//   Cast(x, to)                           -> the value itself, when `to` is stored as x is
//                                            (float -> float, int -> int); int -> float: to_f32
//   Slice(x, starts, ends, [axes], [steps]) of a computed x, one axis, step 1 -> narrow
//   Concat(x0, x1, ..., axis) of computed values, and constants whose elements are all
//     equal (torch.zeros, ones, full) or one row repeated -> concat, each constant a
//                                            fill_like of a computed input
//   BatchNormalization                    -> refused by name, with what to do (refused_operator)
#include <algorithm>
#include <optional>
#include <set>

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

// ReduceMean over the axes given (an attribute at opsets 13-17), one
// reduce_mean per axis (a mean over several equals the means taken in
// turn). The batch axis is refused: parallax's rows are the batch, split
// across data-parallel ranks. One exception: a mean over every axis
// (keepdims=0) that is a graph output is the graph's loss written out
// (((y_hat - y) ** 2).mean(), since torch does not export mse_loss): a
// sum over every element scaled by 1/elements of the batch, the sum of
// the shards' summands under any split, as the built-in losses are.
void convert_reduce_mean(ImportContext& c, const NodeProto& node) {
  ValueId y = c.value(in(node, 0), node);
  const Shape s = c.graph().spec(y).shape;
  const std::optional<std::vector<int64_t>> axes = attr_ints(node, "axes");
  const std::string name = ImportContext::node_name(node);
  std::set<int> named;
  if (axes)
    for (int64_t axis : *axes) named.insert(axis_index(node, axis, s.rank()));
  const bool every = named.empty() || static_cast<int>(named.size()) == s.rank();
  if (every && attr_int(node, "keepdims", 1) == 0 && c.is_graph_output(node.output(0))) {
    const ValueId sum = c.graph().add1("sum_leading", {y}, {{"keep", int64_t{0}}}, name + ".sum");
    return c.define(node.output(0), c.graph().add1("affine", {sum}, {{"scale", 1.0 / double(s.numel())}, {"shift", 0.0}},
                                                   name));
  }
  if (!axes || axes->empty())
    fail("{}: axes absent: a mean over every axis, the batch's included; parallax imports ReduceMean over axes "
         "other than the batch axis 0 (name them in the export: x.mean(dim=...)), or over every axis without "
         "keepdims as the graph's loss output", describe(node));
  std::vector<int> dims;
  for (int64_t axis : *axes) dims.push_back(axis_index(node, axis, s.rank()));
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end())
    fail("{}: axes [{}] name an axis twice", describe(node), fmt::join(*axes, ","));
  if (dims.front() == 0)
    fail("{}: axes [{}] include the batch axis 0; parallax imports ReduceMean over the other axes (a mean over "
         "the batch would mix the rows data parallelism splits), or over every axis without keepdims as the "
         "graph's loss output", describe(node), fmt::join(*axes, ","));
  for (size_t i = 0; i < dims.size(); ++i) {
    Attrs attrs;
    if (dims[i] != s.rank() - 1) attrs.set("dim", int64_t{dims[i]});  // absent: the last
    y = c.graph().add1("reduce_mean", {y}, attrs, dims.size() == 1 ? name : fmt::format("{}.{}", name, i));
  }
  if (attr_int(node, "keepdims", 1) == 0) {
    std::vector<int64_t> kept;
    for (int d = 0; d < s.rank(); ++d)
      if (!std::binary_search(dims.begin(), dims.end(), d)) kept.push_back(d == 0 ? -1 : s[d]);  // rows batch-relative
    y = c.graph().add1("reshape", {y}, {{"shape", kept}}, name + ".squeeze");
  }
  c.define(node.output(0), y);
}

void convert_reciprocal(ImportContext& c, const NodeProto& node) {
  c.define(node.output(0), c.graph().add1("pow", {c.value(in(node, 0), node)}, {{"exponent", -1.0}},
                                          ImportContext::node_name(node)));
}

// Div of two values (a divisor per element or per row), of a scalar
// constant by a value (a reciprocal), or of a value by a nonzero scalar
// constant (affine).
void convert_div(ImportContext& c, const NodeProto& node) {
  const std::string name = ImportContext::node_name(node);
  if (c.is_constant(in(node, 1))) {
    if (convert_scalar_arithmetic(c, node)) return;
    fail("{}: a division by the constant {}; parallax imports Div by a nonzero scalar constant or by a computed "
         "value", describe(node), c.constant(in(node, 1), node).shape());
  }
  const ValueId b = c.value(in(node, 1), node);
  if (c.is_constant(in(node, 0))) {
    const Tensor& k = c.constant(in(node, 0), node);
    if (k.numel() != 1)
      fail("{}: a constant numerator of shape {}; parallax imports k / x for a scalar constant k", describe(node),
           k.shape());
    const double v = k.dtype() == DType::f32 ? double(k.f32()[0]) : double(constant_ints(k)[0]);
    ValueId y = c.graph().add1("pow", {b}, {{"exponent", -1.0}}, v == 1 ? name : name + ".reciprocal");
    if (v != 1) y = c.graph().add1("affine", {y}, {{"scale", v}, {"shift", 0.0}}, name);
    return c.define(node.output(0), y);
  }
  const ValueId a = c.value(in(node, 0), node);
  const Shape &sa = c.graph().spec(a).shape, &sb = c.graph().spec(b).shape;
  std::vector<int64_t> row = sa.dims();
  if (!row.empty()) row.back() = 1;
  if (sb != sa && sb != Shape(row))
    fail("{}: shapes {} and {}: parallax imports Div of equal shapes, or by one divisor per row ({})",
         describe(node), sa, sb, Shape(row));
  c.define(node.output(0), c.graph().add1("div", {a, b}, {}, name));
}

// Cast of a computed value: parallax computes in float32 and keeps ids as
// integers, so a cast within one kind changes nothing; integers to float
// is to_f32 (labels read as numbers by a regression's loss); float to
// integers would have no gradient to train through, and is refused.
void convert_cast(ImportContext& c, const NodeProto& node) {
  const ValueId x = c.value(in(node, 0), node);
  const DType from = c.graph().spec(x).dtype;
  const int64_t to = attr_int(node, "to", 0);
  using ::onnx::TensorProto;
  const bool to_float = to == TensorProto::FLOAT || to == TensorProto::DOUBLE || to == TensorProto::FLOAT16 ||
                        to == TensorProto::BFLOAT16;
  const bool to_int = to == TensorProto::INT32 || to == TensorProto::INT64;
  const bool from_float = from == DType::f32, from_int = from == DType::i32 || from == DType::i64;
  if (to_float && from_int)
    return c.define(node.output(0), c.graph().add1("to_f32", {x}, {}, ImportContext::node_name(node)));
  if (!((to_float && from_float) || (to_int && from_int)))
    fail("{}: a cast of a computed {} value to ONNX type {}; parallax casts within floats, within integers and "
         "from integers to float only (a float-to-int cast of data has no gradient to train through)",
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

// Concat of computed values and of constants: a constant whose elements
// are all one value (what torch.zeros, ones and full fold to) is a
// fill_like of the first computed input, so it takes that input's rows and
// split; one of varying values (a table broadcast over the rows:
// torch.zeros(n, k) + table) is a fill_like holding one row of it, which
// every row repeats. A constant whose rows differ, or joined along the
// batch axis, is refused by name.
void convert_concat(ImportContext& c, const NodeProto& node) {
  ValueId reference = kNoValue;
  for (int i = 0; i < node.input_size() && reference == kNoValue; ++i)
    if (!c.is_constant(in(node, i))) reference = c.value(in(node, i), node);
  PX_CHECK(reference != kNoValue, "a Concat of constants only is folded");  // try_fold runs first
  const Shape ref = c.graph().spec(reference).shape;
  const int axis = axis_index(node, attr_int(node, "axis", 0), ref.rank());
  const std::string name = ImportContext::node_name(node);
  std::vector<ValueId> inputs;
  for (int i = 0; i < node.input_size(); ++i) {
    if (!c.is_constant(in(node, i))) {
      inputs.push_back(c.value(in(node, i), node));
      continue;
    }
    const Tensor& k = c.constant(in(node, i), node);
    std::vector<int64_t> want = ref.dims();
    if (k.shape().rank() == ref.rank()) want[static_cast<size_t>(axis)] = k.shape()[axis];
    if (k.dtype() != DType::f32 || k.shape() != Shape(want) || k.numel() == 0)
      fail("{}: input {} is a constant {} {}; parallax joins float constants shaped as the computed inputs {} but "
           "along axis {}", describe(node), i, dtype_name(k.dtype()), k.shape(), ref, axis);
    Attrs attrs{{"dim", int64_t{axis}}, {"length", k.shape()[axis]}};
    const float* v = k.f32();
    if (std::all_of(v, v + k.numel(), [&](float e) { return e == v[0]; })) {
      attrs.set("value", double(v[0]));
    } else {
      const int64_t row = k.numel() / k.shape()[0];
      if (axis == 0)
        fail("{}: input {} is a constant {} of varying values joined along the batch axis 0; parallax joins "
             "constants along the batch axis only when their elements are all equal", describe(node), i, k.shape());
      for (int64_t e = row; e < k.numel(); ++e)
        if (v[e] != v[e % row])
          fail("{}: input {} is a constant {} whose rows differ (row {} is not row 0); parallax joins constants "
               "that are one row repeated over the batch (torch.zeros(n, k) + table)", describe(node), i,
               k.shape(), e / row);
      attrs.set("values", std::vector<double>(v, v + row));
    }
    inputs.push_back(c.graph().add1("fill_like", {reference}, attrs, fmt::format("{}.constant{}", name, i)));
  }
  c.define(node.output(0), c.graph().add1("concat", inputs, {{"dim", int64_t{axis}}}, name));
}

}  // namespace

const std::map<std::string, Converter>& math_converters() {
  static const std::map<std::string, Converter> table{
      {"Sqrt", convert_sqrt}, {"Pow", convert_pow},     {"ReduceMean", convert_reduce_mean},
      {"Cast", convert_cast}, {"Slice", convert_slice},   {"Concat", convert_concat},
      {"Div", convert_div},   {"Reciprocal", convert_reciprocal}};
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
