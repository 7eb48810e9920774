// causal_fill: y = x with every element above the diagonal of the last two
// dims set to `value` (attr; -inf for attention scores): y[..., i, j] =
// value where j > i, else x[..., i, j]. What an imported graph's
// Where(causal mask, scores, -inf) does. Backward: dy with the same
// elements zeroed (causal_fill with value 0). Rows of the batch dims are
// independent; the (T, T) matrix stays whole (its diagonal is global).
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "causal_fill";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "x");
    require(in[0].shape.rank() >= 2, "x must have rank >= 2, got {}", in[0].shape);
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Shape& s = in[0]->shape();
    const int64_t rows = s[-2], cols = s[-1], matrices = s.numel(0, s.rank() - 2);
    const float value = static_cast<float>(a.get_float("value"));
    const float* x = in[0]->f32();
    float* y = out[0]->f32();
    for (int64_t m = 0; m < matrices; ++m)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t k = (m * rows + i) * cols + j;
          y[k] = j > i ? value : x[k];
        }
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("causal_fill", {dout[0]}, {{"value", 0.0}}, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    std::vector<PlacementSignature> s;
    for (int i = 0; i + 2 < in[0].shape.rank(); ++i)
      s.push_back({fmt::format("split_{}", i), {Placement::S(i)}, {Placement::S(i)}});
    s.push_back({"replicated", {Placement::B()}, {Placement::B()}});
    if (a.get_float("value") == 0) s.push_back({"partial", {Placement::P()}, {Placement::P()}});
    return s;
  };
  d.examples = [] {
    // A finite fill: the finite-difference check sums the outputs.
    return std::vector<OpExample>{{{f32({2, 3, 4, 4})}, {{"value", -3.0}}, {}}, {{f32({5, 5})}, {{"value", 0.0}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(causal_fill, make());

}  // namespace
}  // namespace px::ops
