// pow: y = x^p for a constant exponent p (attr exponent): a variance
// written out, (x - mean)^2, or an RMS norm's square, as torch exports them.
// pow_grad: dx = dy · p · x^(p-1), from the saved input x (attr exponent).
// A non-integer p needs x > 0, as in torch.
#include <cmath>

#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

float power_of(float x, double p) {
  if (p == 2) return x * x;
  if (p == 1) return x;
  return static_cast<float>(std::pow(static_cast<double>(x), p));
}

void require_exponent(const Attrs& a) {
  require(std::isfinite(a.get_float("exponent")), "exponent {} must be finite", a.get_float("exponent"));
}

// pointwise_op's shape rule, signatures and cost, with a kernel that reads the exponent.
OpDef with_exponent(OpDef d, std::function<void(double, int64_t, const std::vector<const float*>&, float*)> kernel) {
  const InferFn pointwise = d.infer;
  d.infer = [pointwise](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_exponent(a);
    return pointwise(in, a);
  };
  d.forward = [kernel](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                       const std::vector<Tensor*>& out) {
    std::vector<const float*> ptrs;
    for (const Tensor* t : in) ptrs.push_back(t->f32());
    kernel(a.get_float("exponent"), out[0]->numel(), ptrs, out[0]->f32());
  };
  return d;
}

OpDef make_pow() {
  OpDef d = with_exponent(pointwise_op("pow", 1, {}, 8, false),
                          [](double p, int64_t n, const std::vector<const float*>& in, float* out) {
                            for (int64_t i = 0; i < n; ++i) out[i] = power_of(in[0][i], p);
                          });
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("pow_grad", {n.inputs[0], dout[0]},
                                       {{"exponent", n.attrs.get_float("exponent")}}, n.name + ".grad")};
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({5, 7})}, {{"exponent", 2.0}}, {}},
                                  {{f32({2, 3, 13})}, {{"exponent", 3.0}}, {}},
                                  {{f32({4, 6})}, {{"exponent", 0.5}}, {}, {true}}};
  };
  return d;
}

OpDef make_pow_grad() {
  OpDef d = with_exponent(pointwise_op("pow_grad", 2, {}, 8, /*linear_in_last=*/true),
                          [](double p, int64_t n, const std::vector<const float*>& in, float* out) {
                            for (int64_t i = 0; i < n; ++i)
                              out[i] = in[1][i] * static_cast<float>(p) * power_of(in[0][i], p - 1);
                          });
  d.examples = [] {
    return std::vector<OpExample>{{{f32({5, 7}), f32({5, 7})}, {{"exponent", 2.0}}, {}},
                                  {{f32({4, 6}), f32({4, 6})}, {{"exponent", 0.5}}, {}, {true, false}}};
  };
  return d;
}

PX_REGISTER_OP(pow, make_pow());
PX_REGISTER_OP(pow_grad, make_pow_grad());

}  // namespace
}  // namespace px::ops
