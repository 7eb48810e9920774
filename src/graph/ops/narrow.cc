// narrow: a block of x along one dim, y = x[..., start : start + length, ...]
// (attrs dim, start, length) — one output of an imported Split (GPT's
// q | k | v). narrow_grad puts dy back in a zero tensor of x's size (attrs
// dim, start, size); autodiff sums the blocks' gradients.
//   narrow:      x (A..., S, Z...) -> y (A..., length, Z...)
//   narrow_grad: dy (A..., length, Z...) -> dx (A..., size, Z...)
// Any other dim may be split; the narrowed one stays whole (start is global).
#include <cstring>

#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

// Copies `length` blocks of `inner` floats per outer index between a
// tensor of extent `from` and one of extent `to` along the dim, at `start`
// of the larger one: narrow reads (from = S), narrow_grad writes (to = S).
void copy_blocks(const Shape& big, int dim, int64_t start, int64_t length, const float* src, float* dst, bool gather) {
  const int64_t outer = big.numel(0, dim), inner = big.numel(dim + 1, big.rank()), extent = big[dim];
  for (int64_t o = 0; o < outer; ++o) {
    const float* s = gather ? src + (o * extent + start) * inner : src + o * length * inner;
    float* d = gather ? dst + o * length * inner : dst + (o * extent + start) * inner;
    std::memcpy(d, s, static_cast<size_t>(length * inner) * sizeof(float));
  }
}

std::vector<PlacementSignature> other_dims(int rank, int dim, bool linear) {
  std::vector<PlacementSignature> s{{"replicated", {Placement::B()}, {Placement::B()}}};
  for (int d = 0; d < rank; ++d)
    if (d != dim) s.push_back({fmt::format("split_{}", d), {Placement::S(d)}, {Placement::S(d)}});
  if (linear) s.push_back({"partial", {Placement::P()}, {Placement::P()}});
  return s;
}

OpDef make_narrow() {
  OpDef d;
  d.name = "narrow";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "x");
    const Shape& x = in[0].shape;
    const int64_t dim = a.get_int("dim"), start = a.get_int("start"), length = a.get_int("length");
    require(dim >= 0 && dim < x.rank(), "dim {} outside rank {}", dim, x.rank());
    require(start >= 0 && length >= 0 && start + length <= x[static_cast<int>(dim)], "block [{}, {}) outside {} of dim {}",
            start, start + length, x[static_cast<int>(dim)], dim);
    std::vector<int64_t> y = x.dims();
    y[static_cast<size_t>(dim)] = length;
    return std::vector<TensorSpec>{f32(Shape(y))};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    copy_blocks(in[0]->shape(), static_cast<int>(a.get_int("dim")), a.get_int("start"), a.get_int("length"),
                in[0]->f32(), out[0]->f32(), true);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const int64_t dim = n.attrs.get_int("dim");
    Attrs attrs{{"dim", dim}, {"start", n.attrs.get_int("start")},
                {"size", g.spec(n.inputs[0]).shape[static_cast<int>(dim)]}};
    return std::vector<ValueId>{g.add1("narrow_grad", {dout[0]}, attrs, n.name + ".grad")};
  };
  d.cost = [](const auto&, const auto& out, const Attrs&) { return streaming_cost({out[0]}, out); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    return other_dims(in[0].shape.rank(), static_cast<int>(a.get_int("dim")), true);
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({2, 3, 12})}, {{"dim", int64_t{2}}, {"start", int64_t{4}}, {"length", int64_t{4}}}, {}},
                                  {{f32({6, 5})}, {{"dim", int64_t{0}}, {"start", int64_t{1}}, {"length", int64_t{3}}}, {}}};
  };
  return d;
}

OpDef make_narrow_grad() {
  OpDef d;
  d.name = "narrow_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    const Shape& dy = in[0].shape;
    const int64_t dim = a.get_int("dim"), start = a.get_int("start"), size = a.get_int("size");
    require(dim >= 0 && dim < dy.rank() && start >= 0 && start + dy[static_cast<int>(dim)] <= size,
            "block of {} at {} does not fit size {} along dim {}", dy, start, size, dim);
    std::vector<int64_t> x = dy.dims();
    x[static_cast<size_t>(dim)] = size;
    return std::vector<TensorSpec>{f32(Shape(x))};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    out[0]->zero();
    const int dim = static_cast<int>(a.get_int("dim"));
    copy_blocks(out[0]->shape(), dim, a.get_int("start"), in[0]->shape()[dim], in[0]->f32(), out[0]->f32(), false);
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    return other_dims(in[0].shape.rank(), static_cast<int>(a.get_int("dim")), true);
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({2, 3, 4})}, {{"dim", int64_t{2}}, {"start", int64_t{8}}, {"size", int64_t{12}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(narrow, make_narrow());
PX_REGISTER_OP(narrow_grad, make_narrow_grad());

}  // namespace
}  // namespace px::ops
