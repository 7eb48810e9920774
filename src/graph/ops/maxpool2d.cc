// Max pooling, window k = stride k, NCHW (see kernels/pool.h).  attrs: k.
//   maxpool2d:      x (N, C, H, W) -> y (N, C, H/k, W/k), argmax (N, C, H/k, W/k) i32
//   maxpool2d_grad: argmax, dy -> dx (N, C, H, W)          attrs: k, height H, width W
#include "graph/ops/op_util.h"
#include "kernels/pool.h"

namespace px::ops {
namespace {

OpDef make_maxpool2d() {
  OpDef d;
  d.name = "maxpool2d";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    const Shape& x = in[0].shape;
    int64_t k = a.get_int("k");
    require(x.rank() == 4, "x must be (N, C, H, W), got {}", x);
    require(k >= 1 && x[2] >= k && x[3] >= k, "window {} does not fit input {}", k, x);
    Shape y{x[0], x[1], x[2] / k, x[3] / k};
    return std::vector<TensorSpec>{f32(y), {y, DType::i32}};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Shape& x = in[0]->shape();
    kernels::maxpool2d(x[0], x[1], x[2], x[3], a.get_int("k"), in[0]->f32(), out[0]->f32(),
                       out[1]->data<int32_t>());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const Shape& x = g.spec(n.inputs[0]).shape;
    Attrs attrs{{"k", n.attrs.get_int("k")}, {"height", x[2]}, {"width", x[3]}};
    return std::vector<ValueId>{g.add1("maxpool2d_grad", {n.outputs[1], dout[0]}, attrs, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = double(in[0].shape.numel());
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs&) {
    std::vector<PlacementSignature> s;
    for (int dim : {0, 1})
      s.push_back({fmt::format("split_{}", dim), {Placement::S(dim)}, {Placement::S(dim), Placement::S(dim)}});
    s.push_back({"replicated", {Placement::B()}, {Placement::B(), Placement::B()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 5, 6, 7})}, {{"k", int64_t{2}}}, {}},
                                  {{f32({2, 3, 9, 9})}, {{"k", int64_t{3}}}, {}}};
  };
  return d;
}

OpDef make_maxpool2d_grad() {
  OpDef d;
  d.name = "maxpool2d_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 2);
    require_dtype(in[0], DType::i32, "argmax");
    const Shape& y = in[1].shape;
    return std::vector<TensorSpec>{f32({y[0], y[1], a.get_int("height"), a.get_int("width")})};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Shape& x = out[0]->shape();
    kernels::maxpool2d_backward(x[0], x[1], x[2], x[3], a.get_int("k"), in[0]->data<int32_t>(), in[1]->f32(),
                                out[0]->f32());
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs&) {
    std::vector<PlacementSignature> s;
    for (int dim : {0, 1})
      s.push_back({fmt::format("split_{}", dim), {Placement::S(dim), Placement::S(dim)}, {Placement::S(dim)}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    s.push_back({"partial_grad", {Placement::B(), Placement::P()}, {Placement::P()}});
    return s;
  };
  d.examples = [] {
    // argmax entries index the 6x7 plane; any in-range values are valid for the placement check.
    return std::vector<OpExample>{{{{Shape{3, 5, 3, 3}, DType::i32}, f32({3, 5, 3, 3})},
                                   {{"k", int64_t{2}}, {"height", int64_t{6}}, {"width", int64_t{7}}},
                                   {42, 0}}};
  };
  return d;
}

PX_REGISTER_OP(maxpool2d, make_maxpool2d());
PX_REGISTER_OP(maxpool2d_grad, make_maxpool2d_grad());

}  // namespace
}  // namespace px::ops
