// mul: y = a ⊙ b, same shapes (GELU's x · Φ(x) in imported graphs).
// Backward: da = dy ⊙ b, db = dy ⊙ a. Not linear in the pair, so no
// partial signature (each rank's product of summands is no summand).
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d = pointwise_op(
      "mul", 2,
      [](int64_t n, const auto& in, float* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = in[0][i] * in[1][i];
      },
      1, false);
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("mul", {dout[0], n.inputs[1]}, {}, n.name + ".grad_a"),
                                g.add1("mul", {dout[0], n.inputs[0]}, {}, n.name + ".grad_b")};
  };
  return d;
}

PX_REGISTER_OP(mul, make());

}  // namespace
}  // namespace px::ops
