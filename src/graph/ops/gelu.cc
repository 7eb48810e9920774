// gelu: GPT-2's tanh approximation.  gelu_grad: dx from the saved input x and dy.
#include "graph/ops/op_util.h"
#include "kernels/elementwise.h"

namespace px::ops {
namespace {

OpDef make_gelu() {
  OpDef d = pointwise_op(
      "gelu", 1, [](int64_t n, const auto& in, float* out) { kernels::gelu(n, in[0], out); }, 8, false);
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("gelu_grad", {n.inputs[0], dout[0]}, {}, n.name + ".grad")};
  };
  return d;
}

OpDef make_gelu_grad() {
  return pointwise_op(
      "gelu_grad", 2,
      [](int64_t n, const auto& in, float* out) { kernels::gelu_backward(n, in[0], in[1], out); }, 12,
      true);
}

PX_REGISTER_OP(gelu, make_gelu());
PX_REGISTER_OP(gelu_grad, make_gelu_grad());

}  // namespace
}  // namespace px::ops
