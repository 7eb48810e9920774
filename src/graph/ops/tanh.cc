// tanh: y = tanh(x) (GELU's tanh form, as torch exports
// F.gelu(approximate="tanh") below opset 20).
// tanh_grad: dx = dy · (1 - y²), from the saved output y.
#include <cmath>

#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make_tanh() {
  OpDef d = pointwise_op(
      "tanh", 1,
      [](int64_t n, const auto& in, float* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[0][i]);
      },
      10, false);
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("tanh_grad", {n.outputs[0], dout[0]}, {}, n.name + ".grad")};
  };
  return d;
}

OpDef make_tanh_grad() {
  return pointwise_op(
      "tanh_grad", 2,
      [](int64_t n, const auto& in, float* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = in[1][i] * (1 - in[0][i] * in[0][i]);
      },
      3, /*linear_in_last=*/true);
}

PX_REGISTER_OP(tanh, make_tanh());
PX_REGISTER_OP(tanh_grad, make_tanh_grad());

}  // namespace
}  // namespace px::ops
