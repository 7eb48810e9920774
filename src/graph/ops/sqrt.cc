// sqrt: y = sqrt(x) (a LayerNorm or RMS norm written out: sqrt(var + eps),
// as torch exports it below opset 17 when the fusion pass does not match).
// sqrt_grad: dx = dy / (2y), from the saved output y.
#include <cmath>

#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make_sqrt() {
  OpDef d = pointwise_op(
      "sqrt", 1,
      [](int64_t n, const auto& in, float* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = std::sqrt(in[0][i]);
      },
      4, false);
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("sqrt_grad", {n.outputs[0], dout[0]}, {}, n.name + ".grad")};
  };
  d.examples = [] {  // the square root's domain
    return std::vector<OpExample>{{{f32({5, 7})}, {}, {}, {true}}, {{f32({2, 3, 13})}, {}, {}, {true}}};
  };
  return d;
}

OpDef make_sqrt_grad() {
  OpDef d = pointwise_op(
      "sqrt_grad", 2,
      [](int64_t n, const auto& in, float* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = in[1][i] / (2 * in[0][i]);
      },
      2, /*linear_in_last=*/true);
  d.examples = [] {
    return std::vector<OpExample>{{{f32({5, 7}), f32({5, 7})}, {}, {}, {true, false}}};
  };
  return d;
}

PX_REGISTER_OP(sqrt, make_sqrt());
PX_REGISTER_OP(sqrt_grad, make_sqrt_grad());

}  // namespace
}  // namespace px::ops
