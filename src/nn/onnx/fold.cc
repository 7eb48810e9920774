#include "nn/onnx/fold.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>

#include "core/error.h"
#include "nn/onnx/fold_support.h"
#include "nn/onnx/tensors.h"

namespace px::nn {
namespace {

using ::onnx::NodeProto;
using namespace folding;

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(static_cast<size_t>(s.rank()), 1);
  for (int d = s.rank() - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

Outputs fold_constant(ImportContext&, const NodeProto& node) {
  if (const auto* a = find_attribute(node, "value")) return {to_tensor(a->t())};
  if (const auto* a = find_attribute(node, "value_float")) return {Tensor::full(Shape{}, a->f())};
  Tensor t = Tensor::empty(Shape{}, DType::i64);
  if (const auto* a = find_attribute(node, "value_int")) {
    t.data<int64_t>()[0] = a->i();
    return {t};
  }
  if (const auto* a = find_attribute(node, "value_ints")) {
    Tensor v = Tensor::empty(Shape{a->ints_size()}, DType::i64);
    for (int i = 0; i < a->ints_size(); ++i) v.data<int64_t>()[i] = a->ints(i);
    return {v};
  }
  fail("{}: only value, value_float, value_int and value_ints constants are read", describe(node));
}

Outputs fold_shape(ImportContext& c, const NodeProto& node) {
  const Shape s = c.spec(ImportContext::input(node, 0), node).shape;
  int64_t start = attr_int(node, "start", 0), end = attr_int(node, "end", s.rank());
  if (start < 0) start += s.rank();
  if (end < 0) end += s.rank();
  start = std::clamp<int64_t>(start, 0, s.rank());
  end = std::clamp<int64_t>(end, start, s.rank());
  Tensor out = Tensor::empty(Shape{end - start}, DType::i64);
  for (int64_t d = start; d < end; ++d) out.data<int64_t>()[d - start] = s[static_cast<int>(d)];
  return {out};
}

Outputs fold_gather(ImportContext& c, const NodeProto& node) {
  const Tensor &data = folded_input(c, node, 0), &indices = folded_input(c, node, 1);
  const Shape& ds = data.shape();
  const int axis = axis_of(attr_int(node, "axis", 0), ds.rank(), node);
  std::vector<int64_t> dims(ds.dims().begin(), ds.dims().begin() + axis);
  for (int64_t d : indices.shape().dims()) dims.push_back(d);
  dims.insert(dims.end(), ds.dims().begin() + axis + 1, ds.dims().end());
  Tensor out = folded_output(dims, data.dtype(), node);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= ds[d];
  for (int d = axis + 1; d < ds.rank(); ++d) inner *= ds[d];
  const std::vector<int64_t> idx = constant_ints(indices);
  int64_t j = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k : idx) {
      if (k < -ds[axis] || k >= ds[axis]) fail("{}: index {} is outside [0, {})", describe(node), k, ds[axis]);
      if (k < 0) k += ds[axis];
      for (int64_t i = 0; i < inner; ++i) copy_element(data, (o * ds[axis] + k) * inner + i, out, j++);
    }
  return {out};
}

// A copy of `t` viewed with `dims` (same elements, same order).
Tensor relabel(const Tensor& t, const std::vector<int64_t>& dims) {
  Tensor out = t.clone();
  return out.reshape(Shape(dims));
}

std::vector<int64_t> axes_input(ImportContext& c, const NodeProto& node, int rank) {
  std::vector<int64_t> axes = constant_ints(folded_input(c, node, 1));
  for (int64_t& a : axes) a = axis_of(a, rank, node);
  std::sort(axes.begin(), axes.end());
  return axes;
}

Outputs fold_unsqueeze(ImportContext& c, const NodeProto& node) {
  const Tensor& x = folded_input(c, node, 0);
  const int rank = x.rank() + static_cast<int>(constant_ints(folded_input(c, node, 1)).size());
  std::vector<int64_t> axes = axes_input(c, node, rank), dims;
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    fail("{}: axes [{}] repeat an axis", describe(node), fmt::join(axes, ","));
  for (int d = 0, k = 0; d < rank; ++d)
    dims.push_back(std::find(axes.begin(), axes.end(), d) != axes.end() ? 1 : x.shape()[k++]);
  return {relabel(x, dims)};
}

Outputs fold_squeeze(ImportContext& c, const NodeProto& node) {
  const Tensor& x = folded_input(c, node, 0);
  const bool all = ImportContext::input(node, 1).empty();
  std::vector<int64_t> axes = all ? std::vector<int64_t>{} : axes_input(c, node, x.rank()), dims;
  for (int d = 0; d < x.rank(); ++d) {
    const bool listed = std::find(axes.begin(), axes.end(), d) != axes.end();
    if ((all && x.shape()[d] == 1) || listed) continue;
    dims.push_back(x.shape()[d]);
  }
  return {relabel(x, dims)};
}

// Concat: every input has the first's rank, dtype and dims but on `axis`.
Outputs fold_concat(ImportContext& c, const NodeProto& node) {
  const Tensor& first = folded_input(c, node, 0);
  const int axis = axis_of(attr_int(node, "axis", 0), first.rank(), node);
  std::vector<int64_t> dims = first.shape().dims();
  dims[axis] = 0;
  for (int i = 0; i < node.input_size(); ++i) {
    const Tensor& t = folded_input(c, node, i);
    bool fits = t.rank() == first.rank() && t.dtype() == first.dtype();
    for (int d = 0; fits && d < t.rank(); ++d) fits = d == axis || t.shape()[d] == first.shape()[d];
    if (!fits)
      fail("{}: input {} is {} {}; concatenating on axis {} needs {} {} but on that axis", describe(node), i,
           dtype_name(t.dtype()), t.shape(), axis, dtype_name(first.dtype()), first.shape());
    dims[axis] += t.shape()[axis];
  }
  Tensor out = folded_output(dims, first.dtype(), node);
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= dims[d];
  int64_t j = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int i = 0; i < node.input_size(); ++i) {
      const Tensor& t = folded_input(c, node, i);
      const int64_t block = t.numel() / outer;
      for (int64_t k = 0; k < block; ++k) copy_element(t, o * block + k, out, j++);
    }
  return {out};
}

Outputs fold_slice(ImportContext& c, const NodeProto& node) {
  const Tensor& x = folded_input(c, node, 0);
  const Shape& s = x.shape();
  const std::vector<int64_t> starts = constant_ints(folded_input(c, node, 1)), ends = constant_ints(folded_input(c, node, 2));
  std::vector<int64_t> axes, steps(starts.size(), 1);
  if (!ImportContext::input(node, 3).empty()) axes = constant_ints(folded_input(c, node, 3));
  else for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (!ImportContext::input(node, 4).empty()) steps = constant_ints(folded_input(c, node, 4));
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail("{}: {} starts, {} ends, {} axes and {} steps; Slice needs one of each per sliced axis", describe(node),
         starts.size(), ends.size(), axes.size(), steps.size());
  // Per dim: first index, step, count (ONNX's clamping rules).
  std::vector<int64_t> first(s.rank(), 0), step(s.rank(), 1), count(s.dims().begin(), s.dims().end());
  for (size_t i = 0; i < starts.size(); ++i) {
    const int d = axis_of(axes[i], s.rank(), node);
    const int64_t n = s[d];
    if (steps[i] == 0) fail("{}: step 0", describe(node));
    // A step past the dim takes at most the first element; clamped so the
    // count below cannot overflow.
    const int64_t st = std::clamp<int64_t>(steps[i], -(n + 1), n + 1);
    auto clamp = [&](int64_t v) {
      if (v < 0) v += n;
      return st > 0 ? std::clamp<int64_t>(v, 0, n) : std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t b = clamp(starts[i]), e = clamp(ends[i]);
    first[d] = b;
    step[d] = st;
    count[d] = st > 0 ? (e > b ? 1 + (e - b - 1) / st : 0) : (b > e ? 1 + (b - e - 1) / -st : 0);
  }
  Tensor out = folded_output(count, x.dtype(), node);
  const std::vector<int64_t> xs = strides_of(s), os = strides_of(out.shape());
  for (int64_t j = 0; j < out.numel(); ++j) {
    int64_t src = 0;
    for (int d = 0; d < s.rank(); ++d) src += (first[d] + (j / os[d] % count[d]) * step[d]) * xs[d];
    copy_element(x, src, out, j);
  }
  return {out};
}

// Cast to a float type (f32 here), to bool (nonzero: 1) or to an integer
// type (i64 here; a float truncated toward zero).
Outputs fold_cast(ImportContext& c, const NodeProto& node) {
  using ::onnx::TensorProto;
  const Tensor& x = folded_input(c, node, 0);
  const int64_t to = attr_int(node, "to", 0);
  if (to == TensorProto::STRING || to == TensorProto::UNDEFINED || to == TensorProto::COMPLEX64 ||
      to == TensorProto::COMPLEX128)
    fail("{}: cast to ONNX type {}; parallax folds casts to numbers and bools", describe(node), to);
  const bool to_float = to == TensorProto::FLOAT || to == TensorProto::DOUBLE || to == TensorProto::FLOAT16 ||
                        to == TensorProto::BFLOAT16;
  Tensor out = Tensor::empty(x.shape(), to_float ? DType::f32 : DType::i64);
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (to_float) out.f32()[i] = static_cast<float>(number(x, i));
    else if (to == TensorProto::BOOL) out.data<int64_t>()[i] = number(x, i) != 0;
    else out.data<int64_t>()[i] = x.dtype() == DType::i64 ? x.data<int64_t>()[i] : integer_of(x.f32()[i], node);
  }
  return {out};
}

// Range(start, limit, delta) of scalars: start, start + delta, ... up to
// (not including) limit; torch.arange(T) for positions and causal masks.
// In i64 when all three are integers, else in float.
Outputs fold_range(ImportContext& c, const NodeProto& node) {
  const std::array<const char*, 3> names{"start", "limit", "delta"};
  bool ints = true;
  for (int i = 0; i < 3; ++i) {
    const Tensor& t = folded_input(c, node, i);
    if (t.numel() != 1) fail("{}: {} has shape {}; Range takes scalars", describe(node), names[i], t.shape());
    ints = ints && t.dtype() == DType::i64;
  }
  const Tensor &start = folded_input(c, node, 0), &limit = folded_input(c, node, 1), &delta = folded_input(c, node, 2);
  if (number(delta, 0) == 0) fail("{}: delta is 0; Range needs a nonzero step", describe(node));
  // The count, max(ceil((limit - start) / delta), 0), past the folding
  // limit clamped so folded_output refuses it by name.
  constexpr int64_t kTooMany = std::numeric_limits<int64_t>::max() / 2;
  int64_t count = 0;
  if (ints) {
    const __int128 s = start.data<int64_t>()[0], l = limit.data<int64_t>()[0], d = delta.data<int64_t>()[0];
    const __int128 span = d > 0 ? l - s : s - l, step = d > 0 ? d : -d;
    count = span <= 0 ? 0 : static_cast<int64_t>(std::min<__int128>((span + step - 1) / step, kTooMany));
  } else {
    const double n = std::ceil((number(limit, 0) - number(start, 0)) / number(delta, 0));
    if (std::isnan(n)) fail("{}: start, limit and delta must be finite", describe(node));
    count = n <= 0 ? 0 : n >= double(kTooMany) ? kTooMany : static_cast<int64_t>(n);
  }
  Tensor out = folded_output({count}, ints ? DType::i64 : DType::f32, node);
  for (int64_t i = 0; i < count; ++i) {
    // Each element lies between start and limit; only i·delta could overflow.
    if (ints)
      out.data<int64_t>()[i] = static_cast<int64_t>(start.data<int64_t>()[0] + __int128{i} * delta.data<int64_t>()[0]);
    else out.f32()[i] = static_cast<float>(number(start, 0) + double(i) * number(delta, 0));
  }
  return {out};
}

Outputs fold_reshape(ImportContext& c, const NodeProto& node) {
  const Tensor& x = folded_input(c, node, 0);
  std::vector<int64_t> dims = constant_ints(folded_input(c, node, 1));
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 && static_cast<int>(i) < x.rank()) dims[i] = x.shape()[static_cast<int>(i)];
    if (dims[i] < -1 || (dims[i] == -1 && infer >= 0))
      fail("{}: shape [{}] has {}; Reshape takes sizes, 0 (keep) and one -1 (infer)", describe(node),
           fmt::join(constant_ints(folded_input(c, node, 1)), ","), dims[i] == -1 ? "two -1" : "a negative size");
    if (dims[i] == -1) infer = static_cast<int>(i);
    else if (__builtin_mul_overflow(known, dims[i], &known))
      fail("{}: shape [{}] has more than 2^63 elements", describe(node), fmt::join(dims, ","));
  }
  if (infer >= 0) dims[infer] = known == 0 ? 0 : x.numel() / known;
  if (Shape(dims).numel() != x.numel()) fail("{}: cannot view {} as {}", describe(node), x.shape(), Shape(dims));
  return {relabel(x, dims)};
}

Outputs fold_constant_of_shape(ImportContext& c, const NodeProto& node) {
  const std::vector<int64_t> dims = constant_ints(folded_input(c, node, 0));
  const auto* a = find_attribute(node, "value");
  const Tensor v = a == nullptr ? Tensor::zeros(Shape{}) : to_tensor(a->t());
  if (v.numel() != 1) fail("{}: value has {} elements; ConstantOfShape takes one", describe(node), v.numel());
  Tensor out = folded_output(dims, v.dtype(), node);
  for (int64_t j = 0; j < out.numel(); ++j) copy_element(v, 0, out, j);
  return {out};
}

Outputs fold_identity(ImportContext& c, const NodeProto& node) { return {folded_input(c, node, 0)}; }

// Trilu(x, [k], upper) of a constant (a causal mask made in the graph,
// torch.tril(torch.ones(T, T))): the elements on and above diagonal k
// (upper) or on and below it kept, the others 0, over the last two dims.
Outputs fold_trilu(ImportContext& c, const NodeProto& node) {
  const Tensor& x = folded_input(c, node, 0);
  const Shape& s = x.shape();
  if (s.rank() < 2) fail("{}: Trilu needs a matrix, got {}", describe(node), s);
  std::vector<int64_t> diagonal{0};
  if (!ImportContext::input(node, 1).empty()) diagonal = constant_ints(folded_input(c, node, 1));
  if (diagonal.size() != 1) fail("{}: k has {} elements; Trilu takes a scalar", describe(node), diagonal.size());
  const int64_t k = diagonal[0];
  const bool upper = attr_int(node, "upper", 1) != 0;
  const int64_t rows = s[s.rank() - 2], cols = s[s.rank() - 1];
  Tensor out = Tensor::empty(s, x.dtype());
  std::memset(out.raw(), 0, static_cast<size_t>(out.numel()) * dtype_size(x.dtype()));
  for (int64_t j = 0; j < out.numel(); ++j) {
    const int64_t col = j % cols, row = j / cols % rows;
    if (upper ? col - row >= k : col - row <= k) copy_element(x, j, out, j);
  }
  return {out};
}

const std::map<std::string, FoldFn>& folders() {
  static const std::map<std::string, FoldFn> table{
      {"Constant", fold_constant},     {"Shape", fold_shape},          {"Gather", fold_gather},
      {"Unsqueeze", fold_unsqueeze},   {"Squeeze", fold_squeeze},      {"Concat", fold_concat},
      {"Slice", fold_slice},           {"Cast", fold_cast},            {"Reshape", fold_reshape},
      {"Range", fold_range},           {"Expand", fold_expand},        {"Where", fold_where},
      {"Add", fold_arithmetic},        {"Sub", fold_arithmetic},       {"Mul", fold_arithmetic},
      {"Div", fold_arithmetic},        {"Equal", fold_comparison},     {"Less", fold_comparison},
      {"LessOrEqual", fold_comparison}, {"Greater", fold_comparison},  {"GreaterOrEqual", fold_comparison},
      {"Not", fold_not},               {"ConstantOfShape", fold_constant_of_shape},
      {"Identity", fold_identity},     {"Trilu", fold_trilu}};
  return table;
}

}  // namespace

std::vector<std::string> foldable_operators() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : folders()) names.push_back(name);
  return names;
}

std::vector<int64_t> constant_ints(const Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[i] = t.dtype() == DType::i64 ? t.data<int64_t>()[i] : integer_of(t.f32()[i], "a float constant read as integers");
  return out;
}

std::optional<std::vector<Tensor>> try_fold(ImportContext& context, const NodeProto& node) {
  auto it = folders().find(node.op_type());
  if (it == folders().end()) return std::nullopt;
  if (node.op_type() == "Shape") return it->second(context, node);  // of any value: shapes are static
  // A table lookup in a float initializer is a parameter's (positions in
  // wpe): it is converted (embedding of arange), never frozen into a constant.
  if (node.op_type() == "Gather" && context.is_initializer(ImportContext::input(node, 0)) &&
      !context.is_constant(ImportContext::input(node, 0)))
    return std::nullopt;
  // A float initializer read only here is a buffer (a causal mask), not a
  // parameter: those fold. One an earlier node read as a value does not.
  for (const std::string& name : node.input())
    if (!name.empty() && !context.is_constant(name) && !context.is_initializer(name)) return std::nullopt;
  return it->second(context, node);
}

}  // namespace px::nn
