// erf: y = erf(x), the Gauss error function (GELU's exact form,
// 0.5 · x · (1 + erf(x / sqrt 2)), as torch exports nn.GELU()).
// erf_grad: dx = dy · 2/sqrt(pi) · exp(-x²), from the saved input x.
#include <cmath>

#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make_erf() {
  OpDef d = pointwise_op(
      "erf", 1,
      [](int64_t n, const auto& in, float* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = std::erf(in[0][i]);
      },
      10, false);
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("erf_grad", {n.inputs[0], dout[0]}, {}, n.name + ".grad")};
  };
  return d;
}

OpDef make_erf_grad() {
  return pointwise_op(
      "erf_grad", 2,
      [](int64_t n, const auto& in, float* out) {
        const float two_over_sqrt_pi = 1.1283791670955126f;
        for (int64_t i = 0; i < n; ++i) out[i] = in[1][i] * two_over_sqrt_pi * std::exp(-in[0][i] * in[0][i]);
      },
      4, /*linear_in_last=*/true);
}

PX_REGISTER_OP(erf, make_erf());
PX_REGISTER_OP(erf_grad, make_erf_grad());

}  // namespace
}  // namespace px::ops
