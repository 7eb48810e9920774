// reduce_mean: the mean over the last dim, kept as a dim of 1 (ONNX's
// ReduceMean(axes=[-1], keepdims=1): a LayerNorm's mean and variance
// written out, as torch exports them below opset 17 when the fusion pass
// does not match).
// reduce_mean_grad: dx = dy / C on every element of the row (attr width C).
//   reduce_mean:      x (R..., C) -> y (R..., 1)
//   reduce_mean_grad: dy (R..., 1) -> dx (R..., C)
// Any dim but the last may be split; linear, so partial in, partial out.
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

std::vector<PlacementSignature> mean_row_signatures(int rank) {
  std::vector<PlacementSignature> s{{"replicated", {Placement::B()}, {Placement::B()}},
                                    {"partial", {Placement::P()}, {Placement::P()}}};
  for (int d = 0; d + 1 < rank; ++d)
    s.push_back({fmt::format("split_{}", d), {Placement::S(d)}, {Placement::S(d)}});
  return s;
}

OpDef make_reduce_mean() {
  OpDef d;
  d.name = "reduce_mean";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "x");
    require(in[0].shape.rank() >= 1 && in[0].shape.dims().back() > 0, "x {} needs a last dim", in[0].shape);
    return std::vector<TensorSpec>{f32(with_last(in[0].shape, 1))};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t C = in[0]->shape().dims().back(), rows = rows_of(in[0]->shape());
    const float* x = in[0]->f32();
    float* y = out[0]->f32();
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < C; ++c) sum += x[r * C + c];
      y[r] = static_cast<float>(sum / static_cast<double>(C));
    }
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const int64_t C = g.spec(n.inputs[0]).shape.dims().back();
    return std::vector<ValueId>{g.add1("reduce_mean_grad", {dout[0]}, {{"width", C}}, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) { return mean_row_signatures(in[0].shape.rank()); };
  d.examples = [] { return std::vector<OpExample>{{{f32({5, 7})}, {}, {}}, {{f32({2, 3, 13})}, {}, {}}}; };
  return d;
}

OpDef make_reduce_mean_grad() {
  OpDef d;
  d.name = "reduce_mean_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "dy");
    require(in[0].shape.rank() >= 1 && in[0].shape.dims().back() == 1, "dy {} must end in a dim of 1", in[0].shape);
    require(a.get_int("width") > 0, "width {} must be positive", a.get_int("width"));
    return std::vector<TensorSpec>{f32(with_last(in[0].shape, a.get_int("width")))};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t C = a.get_int("width"), rows = in[0]->numel();
    const float* dy = in[0]->f32();
    float* dx = out[0]->f32();
    for (int64_t r = 0; r < rows; ++r) {
      const float v = dy[r] / static_cast<float>(C);
      for (int64_t c = 0; c < C; ++c) dx[r * C + c] = v;
    }
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) { return mean_row_signatures(in[0].shape.rank()); };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({5, 1})}, {{"width", int64_t{7}}}, {}},
                                  {{f32({2, 3, 1})}, {{"width", int64_t{13}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(reduce_mean, make_reduce_mean());
PX_REGISTER_OP(reduce_mean_grad, make_reduce_mean_grad());

}  // namespace
}  // namespace px::ops
