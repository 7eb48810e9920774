// affine: y = scale · x + shift, two scalars (attrs scale, shift; defaults
// 1, 0). What imported graphs do with a constant: attention's 1/sqrt(D),
// GELU's 1/sqrt(2), +1 and ·0.5. Backward: dx = scale · dy. Linear in x
// (partial in, partial out) only without a shift: each summand would add it.
#include <cmath>

#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "affine";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "x");
    require(std::isfinite(a.get_float("scale", 1)) && std::isfinite(a.get_float("shift", 0)),
            "scale {} and shift {} must be finite", a.get_float("scale", 1), a.get_float("shift", 0));
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const float scale = static_cast<float>(a.get_float("scale", 1)), shift = static_cast<float>(a.get_float("shift", 0));
    const float* x = in[0]->f32();
    float* y = out[0]->f32();
    for (int64_t i = 0, n = in[0]->numel(); i < n; ++i) y[i] = scale * x[i] + shift;
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{
        g.add1("affine", {dout[0]}, {{"scale", n.attrs.get_float("scale", 1)}}, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 2); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    return pointwise_signatures(in[0].shape.rank(), 1, 1, /*linear=*/a.get_float("shift", 0) == 0);
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({6, 5})}, {{"scale", 0.7071}, {"shift", 1.0}}, {}},
                                  {{f32({3, 4, 2})}, {{"scale", -2.0}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(affine, make());

}  // namespace
}  // namespace px::ops
