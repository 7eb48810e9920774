// The operators torch.onnx.export (opset 17) writes for a GPT-style
// transformer, as parallax ops. Legend: B batch rows, T positions, C
// width, H heads, D = C/H, V vocabulary.
//   Gather(wte (V, C), tokens (B, T))       -> embedding (of positions 0..T-1: of arange)
//   LayerNormalization(x, scale, bias)      -> layernorm (last axis)
//   Transpose(x, perm)                      -> transpose (weights included:
//                                              torch's Linear reads W (out, in) as Wᵀ)
//   Split(qkv (B, T, 3C), [C, C, C], axis)  -> three narrow nodes
//   Softmax(scores, axis=-1)                -> softmax
//   Where(causal mask, -inf, scores)        -> causal_fill
//   Mul/Add/Sub with a scalar constant      -> affine; Mul of two values -> mul (equal shapes, a factor
//                                              per row, or per trailing position) (Div: convert_math.cc)
//   Erf, Tanh                               -> erf, tanh (GELU's two forms)
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "nn/onnx/convert.h"
#include "nn/onnx/fold.h"
#include "nn/onnx/tensors.h"

namespace px::nn {
namespace {

using ::onnx::NodeProto;

std::string name_of(const NodeProto& node) { return ImportContext::node_name(node); }

int positive_axis(const NodeProto& node, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) fail("{}: axis {} outside rank {}", describe(node), axis, rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Gather(table, ids) along axis 0: an embedding lookup of the ids (B, T),
// or of constant positions 0..n-1 (arange; torch.arange(T) folded at
// import) in the (V, C) table. Positions with leading dims, each row
// 0..n-1 ((1, T), or (B, T) expanded over the batch), look up (n, C) once:
// the Add that reads them broadcasts it over the rows, as it would the
// repeated rows, and it holds on any batch split.
void convert_gather(ImportContext& c, const NodeProto& node) {
  if (attr_int(node, "axis", 0) != 0) fail("{}: parallax imports Gather along axis 0 (a table lookup)", describe(node));
  const ValueId table = c.value(in(node, 0), node);
  const Shape table_shape = c.graph().spec(table).shape;  // (V, C)
  if (table_shape.rank() != 2) fail("{}: the table must be (V, C)", describe(node));
  ValueId ids = kNoValue;
  if (c.is_constant(in(node, 1))) {
    const Tensor& indices = c.constant(in(node, 1), node);
    const int64_t n = indices.rank() == 0 ? 1 : indices.shape()[-1];
    const std::vector<int64_t> positions = constant_ints(indices);
    for (size_t i = 0; i < positions.size(); ++i)
      if (positions[i] != static_cast<int64_t>(i) % std::max<int64_t>(n, 1))
        fail("{}: constant indices {} are not positions 0..{} (in every row); parallax imports constant indices "
             "as arange", describe(node), indices.shape(), n - 1);
    if (n > table_shape[0])
      fail("{}: positions 0..{} index a table '{}' of {} rows: the sequence is longer than the model's "
           "position table", describe(node), n - 1, in(node, 0), table_shape[0]);
    ids = c.graph().add1("arange", {}, {{"n", n}}, name_of(node) + ".positions");
  } else {
    ids = c.value(in(node, 1), node);
  }
  c.define(node.output(0), c.graph().add1("embedding", {ids, table}, {}, name_of(node)));
}

void convert_layer_normalization(ImportContext& c, const NodeProto& node) {
  const ValueId x = c.value(in(node, 0), node);
  const int rank = c.graph().spec(x).shape.rank();
  if (positive_axis(node, attr_int(node, "axis", -1), rank) != rank - 1)
    fail("{}: parallax normalizes over the last axis only", describe(node));
  if (in(node, 2).empty()) fail("{}: a bias is required", describe(node));
  for (int i = 1; i < node.output_size(); ++i)
    if (!node.output(i).empty()) fail("{}: the Mean and InvStdDev outputs are not supported", describe(node));
  const ValueId scale = c.value(in(node, 1), node), bias = c.value(in(node, 2), node);
  c.define(node.output(0), c.graph().add1("layernorm", {x, scale, bias}, {{"eps", attr_float(node, "epsilon", 1e-5)}},
                                          name_of(node)));
}

void convert_transpose(ImportContext& c, const NodeProto& node) {
  const ValueId x = c.value(in(node, 0), node);
  const int rank = c.graph().spec(x).shape.rank();
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) perm[static_cast<size_t>(i)] = rank - 1 - i;  // ONNX's default: reversed
  if (auto given = attr_ints(node, "perm")) perm = *given;
  c.define(node.output(0), c.graph().add1("transpose", {x}, {{"perm", perm}}, name_of(node)));
}

// Split(x, sizes, axis): output i is the block of sizes[i] after the
// earlier ones (equal blocks when sizes is absent).
void convert_split(ImportContext& c, const NodeProto& node) {
  const ValueId x = c.value(in(node, 0), node);
  const Shape s = c.graph().spec(x).shape;
  const int axis = positive_axis(node, attr_int(node, "axis", 0), s.rank());
  std::vector<int64_t> sizes;
  if (!in(node, 1).empty()) sizes = constant_ints(c.constant(in(node, 1), node));
  else sizes.assign(static_cast<size_t>(node.output_size()), s[axis] / node.output_size());
  if (static_cast<int>(sizes.size()) != node.output_size())
    fail("{}: {} sizes for {} outputs", describe(node), sizes.size(), node.output_size());
  int64_t start = 0;
  for (int i = 0; i < node.output_size(); ++i) {
    const int64_t length = sizes[static_cast<size_t>(i)];
    const Attrs attrs{{"dim", int64_t{axis}}, {"start", start}, {"length", length}};
    c.define(node.output(i), c.graph().add1("narrow", {x}, attrs, fmt::format("{}.{}", name_of(node), i)));
    start += length;
  }
  if (start != s[axis]) fail("{}: sizes add to {}, the axis has {}", describe(node), start, s[axis]);
}

void convert_softmax(ImportContext& c, const NodeProto& node) {
  const ValueId x = c.value(in(node, 0), node);
  const int rank = c.graph().spec(x).shape.rank();
  if (positive_axis(node, attr_int(node, "axis", -1), rank) != rank - 1)
    fail("{}: parallax imports Softmax over the last axis", describe(node));
  c.define(node.output(0), c.graph().add1("softmax", {x}, {}, name_of(node)));
}

void convert_erf(ImportContext& c, const NodeProto& node) {
  c.define(node.output(0), c.graph().add1("erf", {c.value(in(node, 0), node)}, {}, name_of(node)));
}

// Gelu (opset 20, or made by the fusion pass): the tanh form is parallax's gelu.
void convert_gelu(ImportContext& c, const NodeProto& node) {
  if (attr_string(node, "approximate", "none") != "tanh")
    fail("{}: parallax's gelu is the tanh approximation; the exact (erf) form imports as its Erf graph", describe(node));
  c.define(node.output(0), c.graph().add1("gelu", {c.value(in(node, 0), node)}, {}, name_of(node)));
}

void convert_tanh(ImportContext& c, const NodeProto& node) {
  c.define(node.output(0), c.graph().add1("tanh", {c.value(in(node, 0), node)}, {}, name_of(node)));
}

// Mul of two values: of one shape, by a factor per row (an RMS norm's
// x * rsqrt(mean(x^2) + eps): (R..., C) by (R..., 1)) or by a factor per
// position of the trailing dims (its weight (C)), either operand first; a
// scalar constant operand is affine's.
void convert_mul(ImportContext& c, const NodeProto& node) {
  if (convert_scalar_arithmetic(c, node)) return;
  ValueId a = c.value(in(node, 0), node), b = c.value(in(node, 1), node);
  const Graph& g = c.graph();
  auto broadcast = [&](ValueId x, ValueId factor) {
    const Shape &sx = g.spec(x).shape, &sf = g.spec(factor).shape;
    if (sx == sf) return true;
    if (sx.rank() >= 1 && sf.rank() == sx.rank() && sf[-1] == 1 && std::equal(sf.dims().begin(), sf.dims().end() - 1, sx.dims().begin()))
      return true;  // a factor per row
    return sf.rank() >= 1 && sf.rank() < sx.rank() &&
           std::equal(sf.dims().begin(), sf.dims().end(), sx.dims().end() - sf.rank());
  };
  if (!broadcast(a, b)) std::swap(a, b);
  if (!broadcast(a, b))
    fail("{}: shapes {} and {}: parallax imports Mul of equal shapes, by one factor per row (a last dim of 1), "
         "by the other operand's trailing dims, or by a scalar constant", describe(node), g.spec(b).shape,
         g.spec(a).shape);
  c.define(node.output(0), c.graph().add1("mul", {a, b}, {}, name_of(node)));
}

// Sub of two values of one shape: a + (-1)·b.
void convert_sub(ImportContext& c, const NodeProto& node) {
  if (convert_scalar_arithmetic(c, node)) return;
  const ValueId a = c.value(in(node, 0), node), b = c.value(in(node, 1), node);
  if (c.graph().spec(a).shape != c.graph().spec(b).shape)
    fail("{}: parallax imports Sub of equal shapes or of a scalar", describe(node));
  const ValueId minus_b = c.graph().add1("affine", {b}, {{"scale", -1.0}}, name_of(node) + ".negate");
  c.define(node.output(0), c.graph().add1("add", {a, minus_b}, {}, name_of(node)));
}


// Is cond, broadcast over (T, T), true exactly where j > i (`above`) or
// exactly where j <= i (!above)? Its leading dims must all be 1.
bool causal(const Tensor& cond, int64_t t, bool above) {
  const Shape& s = cond.shape();
  if (s.rank() < 2 || s[-1] != t || s[-2] != t || s.numel() != t * t) return false;
  const std::vector<int64_t> v = constant_ints(cond);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j)
      if ((v[static_cast<size_t>(i * t + j)] != 0) != (above ? j > i : j <= i)) return false;
  return true;
}

// Where(cond, a, b) with a constant causal cond and one constant scalar
// branch: the scores' upper triangle set to that scalar (causal_fill).
void convert_where(ImportContext& c, const NodeProto& node) {
  const bool fill_first = c.is_constant(in(node, 1));  // Where(mask, -inf, scores)
  const std::string filled = in(node, fill_first ? 1 : 2), kept = in(node, fill_first ? 2 : 1);
  if (!c.is_constant(in(node, 0)) || !c.is_constant(filled) || c.constant(filled, node).numel() != 1)
    fail("{}: parallax imports Where as a causal mask: a constant condition and one scalar constant branch",
         describe(node));
  const ValueId scores = c.value(kept, node);
  const Shape s = c.graph().spec(scores).shape;
  const Tensor& cond = c.constant(in(node, 0), node);
  // The filled branch is taken where cond holds (first) or where it does not (second).
  if (s.rank() < 2 || s[-1] != s[-2] || !causal(cond, s[-1], fill_first))
    fail("{}: the condition {} is not a causal mask over the last two dims of {}", describe(node), cond.shape(), s);
  const Tensor& value = c.constant(filled, node);
  const double fill = value.dtype() == DType::f32 ? double(value.f32()[0]) : double(value.data<int64_t>()[0]);
  c.define(node.output(0), c.graph().add1("causal_fill", {scores}, {{"value", fill}}, name_of(node)));
}

// A Reshape's target with ONNX's 0 (copy) and -1 (infer) resolved against `from`.
std::vector<int64_t> resolved(const Shape& from, std::vector<int64_t> dims) {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 && static_cast<int>(i) < from.rank()) dims[i] = from[static_cast<int>(i)];
    if (dims[i] == -1) infer = static_cast<int>(i);
    else known *= dims[i];
  }
  if (infer >= 0 && known > 0) dims[static_cast<size_t>(infer)] = from.numel() / known;
  return dims;
}

// parallax.CausalSelfAttention (fuse.h): qkv (B, T, 3C) viewed as
// (B, T, 3, H, D) -> attention -> (B, T, H, D). The fusion matched the
// structure; the folded shapes, scale and mask are checked here.
void convert_fused_attention(ImportContext& c, const NodeProto& node) {
  const ValueId qkv = c.value(in(node, 0), node);
  const Shape s = c.graph().spec(qkv).shape;
  if (s.rank() != 3 || s[2] % 3 != 0) fail("{}: q|k|v {} must be (B, T, 3C)", describe(node), s);
  const int64_t B = s[0], T = s[1], C = s[2] / 3;
  if (constant_ints(c.constant(in(node, 1), node)) != std::vector<int64_t>{C, C, C})
    fail("{}: the Split must cut (B, T, 3C) into three (B, T, C)", describe(node));
  const std::vector<int64_t> heads = resolved(Shape{B, T, C}, constant_ints(c.constant(in(node, 2), node)));
  for (int i = 3; i <= 4; ++i)
    if (resolved(Shape{B, T, C}, constant_ints(c.constant(in(node, i), node))) != heads)
      fail("{}: q, k and v are reshaped to different head layouts", describe(node));
  if (heads.size() != 4 || heads[0] != B || heads[1] != T || heads[2] * heads[3] != C)
    fail("{}: heads {} must be (B, T, H, D) with H·D = {}", describe(node), Shape(heads), C);
  const int64_t H = heads[2], D = heads[3];
  const Tensor& scale = c.constant(in(node, 5), node);
  const double expected = 1.0 / std::sqrt(double(D)), got = scale.dtype() == DType::f32 ? scale.f32()[0] : 0.0;
  if (std::abs(got - expected) > 1e-6 * expected)
    fail("{}: scores scaled by {}; parallax's attention scales by 1/sqrt(D) = {}", describe(node), got, expected);
  if (!causal(c.constant(in(node, 6), node), T, /*above=*/true))
    fail("{}: the mask is not causal over ({}, {})", describe(node), T, T);
  const std::string name = name_of(node);
  const ValueId heads_view =
      c.graph().add1("reshape", {qkv}, {{"shape", std::vector<int64_t>{-1, T, 3, H, D}}}, name + ".split_heads");
  c.define(node.output(0), c.graph().add1("attention", {heads_view}, {}, name));  // (B, T, H, D)
}

}  // namespace

const std::map<std::string, Converter>& fused_converters() {
  static const std::map<std::string, Converter> table{{"CausalSelfAttention", convert_fused_attention}};
  return table;
}

bool convert_scalar_arithmetic(ImportContext& c, const NodeProto& node) {
  const bool first = c.is_constant(in(node, 0)), second = c.is_constant(in(node, 1));
  if (first == second) return false;  // two values (or two constants: folded before)
  const Tensor& k = c.constant(in(node, first ? 0 : 1), node);
  if (k.numel() != 1)
    fail("{}: a constant operand of shape {}; parallax imports scalar constants here", describe(node), k.shape());
  const double v = k.dtype() == DType::f32 ? double(k.f32()[0]) : double(k.data<int64_t>()[0]);
  const ValueId x = c.value(in(node, first ? 1 : 0), node);
  const std::string& op = node.op_type();
  double scale = 1, shift = 0;
  if (op == "Add") shift = v;
  else if (op == "Mul") scale = v;
  else if (op == "Sub" && first) scale = -1, shift = v;  // v - x
  else if (op == "Sub") shift = -v;
  else if (op == "Div" && !first && v != 0) scale = 1 / v;
  else return false;
  c.define(node.output(0), c.graph().add1("affine", {x}, {{"scale", scale}, {"shift", shift}}, name_of(node)));
  return true;
}

const std::map<std::string, Converter>& transformer_converters() {
  static const std::map<std::string, Converter> table{
      {"Gather", convert_gather},   {"LayerNormalization", convert_layer_normalization},
      {"Transpose", convert_transpose}, {"Split", convert_split},
      {"Softmax", convert_softmax}, {"Erf", convert_erf},       {"Tanh", convert_tanh},   {"Gelu", convert_gelu},
      {"Mul", convert_mul},         {"Sub", convert_sub},           {"Where", convert_where}};
  return table;
}

}  // namespace px::nn
