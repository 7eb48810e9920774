// fill_like: a constant block shaped like x but for one dim: x's shape with
// dim `dim` of size `length`, every element `value` — the constant pieces of
// an imported Concat (torch.cat([h, torch.zeros(n, k)], 1)), taking the
// rows and any split from the computed value they are joined to.
//   fill_like: x (A..., S, Z...) -> y (A..., length, Z...)   attrs: dim, length, value
// y does not depend on x's values: its gradient is zeros (a fill_like of
// x's own size along dim). Any dim but `dim` may be split, as x's is.
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make_fill_like() {
  OpDef d;
  d.name = "fill_like";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "x");
    const int64_t dim = a.get_int("dim"), length = a.get_int("length");
    require(dim >= 0 && dim < in[0].shape.rank(), "dim {} outside x {}", dim, in[0].shape);
    require(length > 0, "length {} must be positive", length);
    std::vector<int64_t> y = in[0].shape.dims();
    y[static_cast<size_t>(dim)] = length;
    return std::vector<TensorSpec>{f32(Shape(y))};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>&,
                 const std::vector<Tensor*>& out) {
    out[0]->fill(static_cast<float>(a.get_float("value")));
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>&) {
    const int64_t dim = n.attrs.get_int("dim");
    const int64_t size = g.spec(n.inputs[0]).shape[static_cast<int>(dim)];
    return std::vector<ValueId>{g.add1("fill_like", {n.inputs[0]}, {{"dim", dim}, {"length", size}, {"value", 0.0}},
                                       n.name + ".grad")};
  };
  d.cost = [](const auto&, const auto& out, const Attrs&) {
    return OpCost{.flops = 0, .bytes_read = 0, .bytes_written = 4.0 * double(out[0].shape.numel())};
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    std::vector<PlacementSignature> s{{"replicated", {Placement::B()}, {Placement::B()}}};
    for (int k = 0; k < in[0].shape.rank(); ++k)
      if (k != a.get_int("dim")) s.push_back({fmt::format("split_{}", k), {Placement::S(k)}, {Placement::S(k)}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({4, 3})}, {{"dim", int64_t{1}}, {"length", int64_t{2}}, {"value", 0.0}}, {}},
        {{f32({2, 3, 4})}, {{"dim", int64_t{1}}, {"length", int64_t{5}}, {"value", 1.5}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(fill_like, make_fill_like());

}  // namespace
}  // namespace px::ops
