// Legend: N batch rows, C channels, H W image height and width, K inputs
// of a layer, M its outputs.
#include "nn/onnx/convert.h"

#include <algorithm>
#include <functional>
#include <map>

#include "core/error.h"
#include "nn/onnx/fold.h"
#include "nn/onnx/fuse.h"
#include "nn/onnx/tensors.h"

namespace px::nn {
namespace {

using ::onnx::NodeProto;

// Defines the node's first output as `id`.
void result(ImportContext& c, const NodeProto& node, ValueId id) { c.define(node.output(0), id); }

ValueId unary(ImportContext& c, const NodeProto& node, const std::string& op, const Attrs& attrs = {}) {
  return c.graph().add1(op, {c.value(in(node, 0), node)}, attrs, ImportContext::node_name(node));
}

// Gemm: Y = alpha·A'·B' + beta·C. torch's Linear exports A (N, K), B (M, K)
// with transB=1, C (M): matmul(trans_b) then bias_add, the built-in layer's
// two nodes with the weight kept in torch's layout.
void convert_gemm(ImportContext& c, const NodeProto& node) {
  if (attr_int(node, "transA", 0) != 0)
    fail("{}: transA=1 is not supported (A must be the (N, K) activations)", describe(node));
  const double alpha = attr_float(node, "alpha", 1.0), beta = attr_float(node, "beta", 1.0);
  if (alpha != 1.0 || (beta != 1.0 && !in(node, 2).empty()))
    fail("{}: alpha={} beta={}; parallax imports Gemm with alpha = beta = 1", describe(node), alpha, beta);
  Graph& g = c.graph();
  const std::string name = ImportContext::node_name(node);
  const ValueId a = c.value(in(node, 0), node), b = c.value(in(node, 1), node);
  ValueId y = attr_int(node, "transB", 0) != 0 ? g.add1("matmul", {a, b}, {{"trans_b", int64_t{1}}}, name)
                                               : g.add1("linear", {a, b}, {}, name);
  if (!in(node, 2).empty()) {
    const ValueId bias = c.value(in(node, 2), node);
    if (g.spec(bias).shape.rank() != 1)
      fail("{}: C has shape {}; parallax imports a bias C of shape (M)", describe(node), g.spec(bias).shape);
    y = g.add1("bias_add", {y, bias}, {}, name + ".add_bias");
  }
  result(c, node, y);
}

// MatMul of activations (N..., K) by a matrix (K, M): linear; of two
// stacks of matrices (L..., M, K) x (L..., K, N): batched_matmul.
void convert_matmul(ImportContext& c, const NodeProto& node) {
  const ValueId a = c.value(in(node, 0), node), b = c.value(in(node, 1), node);
  const Shape &sa = c.graph().spec(a).shape, &sb = c.graph().spec(b).shape;
  const std::string name = ImportContext::node_name(node);
  if (sb.rank() == 2 && sa.rank() >= 1) return result(c, node, c.graph().add1("linear", {a, b}, {}, name));
  if (sa.rank() >= 3 && sa.rank() == sb.rank())
    return result(c, node, c.graph().add1("batched_matmul", {a, b}, {}, name));
  fail("{}: {} x {}: parallax imports MatMul of (N..., K) by a (K, M) matrix, or of two stacks (L..., M, K) x "
       "(L..., K, N) of the same rank", describe(node), sa, sb);
}

// Add of same shapes, or with one operand the other's trailing dims (a
// bias (M) -> bias_add; a (T, C) table -> broadcast_add).
void convert_add(ImportContext& c, const NodeProto& node) {
  if (convert_scalar_arithmetic(c, node)) return;
  ValueId a = c.value(in(node, 0), node), b = c.value(in(node, 1), node);
  Graph& g = c.graph();
  if (g.spec(a).shape.rank() < g.spec(b).shape.rank()) std::swap(a, b);
  const Shape &sa = g.spec(a).shape, &sb = g.spec(b).shape;
  const std::string name = ImportContext::node_name(node);
  if (sa == sb) return result(c, node, g.add1("add", {a, b}, {}, name));
  const bool trailing = std::equal(sb.dims().begin(), sb.dims().end(), sa.dims().end() - sb.rank());
  if (!trailing)
    fail("{}: shapes {} and {}: parallax imports Add of equal shapes or of one operand matching the other's "
         "trailing dims", describe(node), sa, sb);
  result(c, node, g.add1(sb.rank() == 1 ? "bias_add" : "broadcast_add", {a, b}, {}, name));
}

void convert_relu(ImportContext& c, const NodeProto& node) { result(c, node, unary(c, node, "relu")); }

// The batch dim is written -1 so the node holds on a batch shard.
std::vector<int64_t> batch_relative(std::vector<int64_t> dims) {
  if (!dims.empty()) dims[0] = -1;
  return dims;
}

// Flatten(axis) of (d0, ..., dn): (d0···d(axis-1), d(axis)···dn).
void convert_flatten(ImportContext& c, const NodeProto& node) {
  const Shape s = c.spec(in(node, 0), node).shape;
  int64_t axis = attr_int(node, "axis", 1);
  if (axis < 0) axis += s.rank();
  if (axis < 0 || axis > s.rank()) fail("{}: axis {} outside rank {}", describe(node), axis, s.rank());
  const std::vector<int64_t> dims{s.numel(0, static_cast<int>(axis)), s.numel(static_cast<int>(axis), s.rank())};
  result(c, node, unary(c, node, "reshape", {{"shape", axis == 0 ? dims : batch_relative(dims)}}));
}

// Reshape to a constant shape (folded: torch computes it from Shape).
void convert_reshape(ImportContext& c, const NodeProto& node) {
  const Shape s = c.spec(in(node, 0), node).shape;
  std::vector<int64_t> dims = constant_ints(c.constant(in(node, 1), node));
  const bool allow_zero = attr_int(node, "allowzero", 0) != 0;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 && !allow_zero) {
      if (static_cast<int>(i) >= s.rank()) fail("{}: shape entry {} copies a dim the input lacks", describe(node), i);
      dims[i] = s[static_cast<int>(i)];
    }
    if (dims[i] < -1)
      fail("{}: shape entry {} is {}: expected a size, 0 (copy the input's) or -1 (infer)", describe(node), i, dims[i]);
    if (dims[i] == -1) {
      if (infer >= 0) fail("{}: shape entries {} and {} are both -1: at most one may be inferred", describe(node), infer, i);
      infer = static_cast<int>(i);
    } else if (dims[i] > 0 && known > std::max<int64_t>(s.numel(), 1) / dims[i]) {
      // Larger than the input already (and the product could overflow).
      fail("{}: cannot reshape {} ({} elements) to [{}]", describe(node), s, s.numel(), fmt::join(dims, ","));
    } else {
      known *= dims[i];
    }
  }
  if (infer >= 0 && known > 0) dims[infer] = s.numel() / known;
  if (Shape(dims).numel() != s.numel())
    fail("{}: cannot reshape {} to {}", describe(node), s, Shape(dims));
  // The first dim is the rows: it stays the batch-relative -1 (the others are whole).
  const bool rows_first = !dims.empty() && Shape(dims).numel(1, static_cast<int>(dims.size())) > 0;
  result(c, node, unary(c, node, "reshape", {{"shape", rows_first ? batch_relative(dims) : dims}}));
}

// A 2-D attribute pair (kernel_shape, strides, dilations) that must be
// square; `fallback` when absent.
int64_t square(const NodeProto& node, const std::string& attr, int64_t fallback) {
  const auto v = attr_ints(node, attr);
  if (!v) return fallback;
  if (v->size() != 2 || (*v)[0] != (*v)[1])
    fail("{}: {} must be two equal values, got {}", describe(node), attr, fmt::join(*v, ","));
  return (*v)[0];
}

// Equal padding on all four sides (pads: top, left, bottom, right), or none.
int64_t even_pad(const NodeProto& node) {
  if (attr_string(node, "auto_pad", "NOTSET") != "NOTSET")
    fail("{}: auto_pad is not supported; export explicit pads", describe(node));
  const auto pads = attr_ints(node, "pads");
  if (!pads) return 0;
  for (int64_t p : *pads)
    if (p != (*pads)[0])
      fail("{}: pads {} differ by side; parallax pads all four sides alike", describe(node), fmt::join(*pads, ","));
  return pads->empty() ? 0 : (*pads)[0];
}

// Conv: X (N, C, H, W), W (M, C, Kh, Kw), B (M) -> (N, M, Ho, Wo).
void convert_conv(ImportContext& c, const NodeProto& node) {
  if (attr_int(node, "group", 1) != 1) fail("{}: group={} (grouped convolution) is not supported", describe(node), attr_int(node, "group", 1));
  if (square(node, "dilations", 1) != 1) fail("{}: dilations other than 1 are not supported", describe(node));
  const int64_t stride = square(node, "strides", 1), pad = even_pad(node);
  std::vector<ValueId> inputs{c.value(in(node, 0), node), c.value(in(node, 1), node)};
  if (!in(node, 2).empty()) inputs.push_back(c.value(in(node, 2), node));
  const Shape w = c.graph().spec(inputs[1]).shape;
  if (w.rank() != 4 || w[2] != w[3]) fail("{}: weight {}: parallax imports 2-D convolutions with square kernels", describe(node), w);
  result(c, node, c.graph().add1("conv2d", inputs, {{"stride", stride}, {"pad", pad}}, ImportContext::node_name(node)));
}

// MaxPool with window k = stride k and no padding: (N, C, H, W) -> (N, C, H/k, W/k).
void convert_maxpool(ImportContext& c, const NodeProto& node) {
  const int64_t k = square(node, "kernel_shape", 0), stride = square(node, "strides", 1);
  if (k != stride || even_pad(node) != 0 || square(node, "dilations", 1) != 1 || attr_int(node, "storage_order", 0) != 0)
    fail("{}: kernel {} stride {}: parallax imports MaxPool with stride = kernel, no padding or dilation",
         describe(node), k, stride);
  const Shape x = c.spec(in(node, 0), node).shape;
  if (attr_int(node, "ceil_mode", 0) != 0 && (x[2] % k != 0 || x[3] % k != 0))
    fail("{}: ceil_mode=1 on {} would pad a partial window; not supported", describe(node), x);
  if (node.output_size() > 1 && !node.output(1).empty())
    fail("{}: the Indices output is not supported", describe(node));
  result(c, node, unary(c, node, "maxpool2d", {{"k", k}}));
}

// Dropout(data, ratio, training_mode): parallax's dropout when training
// with ratio > 0, whatever training_mode says (its masks are parallax's
// own draws, not torch's), else the identity. The mask output is not
// supported.
void convert_dropout(ImportContext& c, const NodeProto& node) {
  double ratio = 0.5;  // ONNX's default
  if (!in(node, 1).empty()) {
    const Tensor& r = c.constant(in(node, 1), node);
    if (r.numel() != 1 || r.dtype() != DType::f32) fail("{}: ratio must be one float", describe(node));
    ratio = r.f32()[0];
  }
  if (node.output_size() > 1 && !node.output(1).empty()) fail("{}: the mask output is not supported", describe(node));
  const ValueId x = c.value(in(node, 0), node);
  if (!c.training() || ratio == 0) return result(c, node, x);
  result(c, node, c.graph().add1("dropout", {x}, {{"p", ratio}, {"salt", c.next_salt()}}, ImportContext::node_name(node)));
}

void convert_identity(ImportContext& c, const NodeProto& node) { result(c, node, c.value(in(node, 0), node)); }

// SoftmaxCrossEntropyLoss(scores (N, C), labels (N)), mean: cross_entropy
// scaled by 1/N (a sum of shard summands under a batch split).
void convert_softmax_cross_entropy(ImportContext& c, const NodeProto& node) {
  if (attr_string(node, "reduction", "mean") != "mean")
    fail("{}: reduction '{}'; parallax imports the mean", describe(node), attr_string(node, "reduction", "mean"));
  if (!in(node, 2).empty()) fail("{}: class weights are not supported", describe(node));
  if (node.output_size() > 1 && !node.output(1).empty()) fail("{}: the log_prob output is not supported", describe(node));
  const ValueId scores = c.value(in(node, 0), node), labels = c.value(in(node, 1), node);
  const Shape s = c.graph().spec(scores).shape;
  if (s.rank() != 2) fail("{}: scores {}: parallax imports (N, C) scores", describe(node), s);
  // torch writes ignore_index=-100: harmless, as no label is outside [0, C).
  const int64_t ignore = attr_int(node, "ignore_index", -1);
  if (ignore >= 0 && ignore < s[1]) fail("{}: ignore_index={} is a class; not supported", describe(node), ignore);
  c.loss_scores = scores;
  result(c, node, c.graph().add1("cross_entropy", {scores, labels}, {{"scale", 1.0 / double(s[0])}},
                                 ImportContext::node_name(node)));
}

const std::map<std::string, Converter>& converters() {
  static const std::map<std::string, Converter> table = [] {
    std::map<std::string, Converter> t{
      {"Gemm", convert_gemm},       {"MatMul", convert_matmul},   {"Add", convert_add},
      {"Relu", convert_relu},       {"Flatten", convert_flatten}, {"Reshape", convert_reshape},
      {"Conv", convert_conv},       {"MaxPool", convert_maxpool}, {"Dropout", convert_dropout},
      {"Identity", convert_identity},
      {"SoftmaxCrossEntropyLoss", convert_softmax_cross_entropy}};
    t.insert(transformer_converters().begin(), transformer_converters().end());
    t.insert(math_converters().begin(), math_converters().end());
    return t;
  }();
  return table;
}

}  // namespace

std::vector<std::string> converted_operators() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : converters()) names.push_back(name);
  return names;
}

void convert_node(ImportContext& context, const NodeProto& node) {
  if (node.domain() == kFusedDomain) return fused_converters().at(node.op_type())(context, node);
  auto it = converters().find(node.op_type());
  if (it == converters().end())
    fail("{}: parallax folds this operator only when its inputs are constants (shape arithmetic), "
         "and here one is computed from the data", describe(node));
  it->second(context, node);
}

}  // namespace px::nn
