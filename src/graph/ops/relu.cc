// relu: y = max(x, 0).  relu_grad: dx = dy * (y > 0), from the saved output y.
#include "graph/ops/op_util.h"
#include "kernels/elementwise.h"

namespace px::ops {
namespace {

OpDef make_relu() {
  OpDef d = pointwise_op(
      "relu", 1, [](int64_t n, const auto& in, float* out) { kernels::relu(n, in[0], out); }, 1, false);
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("relu_grad", {n.outputs[0], dout[0]}, {}, n.name + ".grad")};
  };
  return d;
}

OpDef make_relu_grad() {
  return pointwise_op(
      "relu_grad", 2,
      [](int64_t n, const auto& in, float* out) { kernels::relu_backward(n, in[0], in[1], out); }, 1,
      true);
}

PX_REGISTER_OP(relu, make_relu());
PX_REGISTER_OP(relu_grad, make_relu_grad());

}  // namespace
}  // namespace px::ops
