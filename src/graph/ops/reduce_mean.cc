// reduce_mean: the mean over one dim (attr dim, default the last), kept as
// a dim of 1 (ONNX's ReduceMean with keepdims=1): a LayerNorm's mean and
// variance written out, as torch exports them below opset 17 when the
// fusion pass does not match, or a mean over positions or channels.
// reduce_mean_grad: dx = dy / C on every element along the dim (attr width
// C, attr dim as the forward's).
//   reduce_mean:      x (A..., C, Z...) -> y (A..., 1, Z...)
//   reduce_mean_grad: dy (A..., 1, Z...) -> dx (A..., C, Z...)
// Any dim but the reduced one may be split; linear, so partial in, partial out.
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

// The reduced dim: attr dim, or the last when absent.
int reduced_dim(const Shape& s, const Attrs& a) {
  return static_cast<int>(a.has("dim") ? a.get_int("dim") : s.rank() - 1);
}

Shape with_dim(const Shape& s, int dim, int64_t size) {
  std::vector<int64_t> d = s.dims();
  d[static_cast<size_t>(dim)] = size;
  return Shape(d);
}

std::vector<PlacementSignature> mean_signatures(int rank, int dim) {
  std::vector<PlacementSignature> s{{"replicated", {Placement::B()}, {Placement::B()}},
                                    {"partial", {Placement::P()}, {Placement::P()}}};
  for (int d = 0; d < rank; ++d)
    if (d != dim) s.push_back({fmt::format("split_{}", d), {Placement::S(d)}, {Placement::S(d)}});
  return s;
}

OpDef make_reduce_mean() {
  OpDef d;
  d.name = "reduce_mean";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "x");
    const Shape& s = in[0].shape;
    const int dim = reduced_dim(s, a);
    require(dim >= 0 && dim < s.rank(), "dim {} outside x {}", dim, s);
    require(s[dim] > 0, "x {} has no elements along dim {}", s, dim);
    return std::vector<TensorSpec>{f32(with_dim(s, dim, 1))};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Shape& s = in[0]->shape();
    const int dim = reduced_dim(s, a);
    const int64_t outer = s.numel(0, dim), C = s[dim], inner = s.numel(dim + 1, s.rank());
    const float* x = in[0]->f32();
    float* y = out[0]->f32();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double sum = 0;
        for (int64_t c = 0; c < C; ++c) sum += x[(o * C + c) * inner + i];
        y[o * inner + i] = static_cast<float>(sum / static_cast<double>(C));
      }
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const Shape& s = g.spec(n.inputs[0]).shape;
    const int dim = reduced_dim(s, n.attrs);
    return std::vector<ValueId>{g.add1("reduce_mean_grad", {dout[0]}, {{"width", s[dim]}, {"dim", int64_t{dim}}},
                                       n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    return mean_signatures(in[0].shape.rank(), reduced_dim(in[0].shape, a));
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({5, 7})}, {}, {}},
                                  {{f32({2, 3, 13})}, {}, {}},
                                  {{f32({4, 6, 5})}, {{"dim", int64_t{1}}}, {}},
                                  {{f32({4, 3, 2, 6})}, {{"dim", int64_t{2}}}, {}}};
  };
  return d;
}

OpDef make_reduce_mean_grad() {
  OpDef d;
  d.name = "reduce_mean_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "dy");
    const Shape& s = in[0].shape;
    const int dim = reduced_dim(s, a);
    require(dim >= 0 && dim < s.rank() && s[dim] == 1, "dy {} must have a dim of 1 at {}", s, dim);
    require(a.get_int("width") > 0, "width {} must be positive", a.get_int("width"));
    return std::vector<TensorSpec>{f32(with_dim(s, dim, a.get_int("width")))};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Shape& s = out[0]->shape();
    const int dim = reduced_dim(s, a);
    const int64_t outer = s.numel(0, dim), C = s[dim], inner = s.numel(dim + 1, s.rank());
    const float* dy = in[0]->f32();
    float* dx = out[0]->f32();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < inner; ++i)
          dx[(o * C + c) * inner + i] = dy[o * inner + i] / static_cast<float>(C);
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    return mean_signatures(in[0].shape.rank(), reduced_dim(in[0].shape, a));
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({5, 1})}, {{"width", int64_t{7}}}, {}},
                                  {{f32({2, 3, 1})}, {{"width", int64_t{13}}}, {}},
                                  {{f32({4, 1, 5})}, {{"width", int64_t{6}}, {"dim", int64_t{1}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(reduce_mean, make_reduce_mean());
PX_REGISTER_OP(reduce_mean_grad, make_reduce_mean_grad());

}  // namespace
}  // namespace px::ops
