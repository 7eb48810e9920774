// gelu: GPT-2's tanh approximation.  gelu_grad: dx from the saved input x and dy.
// Under bf16 both read x at bf16 precision, as PyTorch's autocast does (the
// GEMM before it yields bf16 there): x may then be stored in bf16 (the
// lowering does, it being read by nothing else), and an fp32 x is rounded
// as it is read, so storing it changes no result.
#include <vector>

#include "core/thread_pool.h"
#include "graph/ops/op_util.h"
#include "graph/precision.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "kernels/grain.h"

namespace px::ops {
namespace {

// x's elements [lo, hi) at bf16 precision, in fp32 (into `scratch`).
const float* at_bf16(const Tensor& x, int64_t lo, int64_t hi, std::vector<float>& scratch) {
  const int64_t n = hi - lo;
  scratch.resize(static_cast<size_t>(n));
  if (x.dtype() == DType::bf16) {
    kernels::to_float(n, static_cast<const kernels::bf16*>(x.raw()) + lo, scratch.data());
  } else {
    for (int64_t i = 0; i < n; ++i) scratch[static_cast<size_t>(i)] = kernels::to_float(kernels::to_bf16(x.f32()[lo + i]));
  }
  return scratch.data();
}

// `kernel(count, x, offset)` over chunks of x read at the node's precision.
template <typename Kernel>
void over_x(const Attrs& a, const Tensor& x, Kernel kernel) {
  if (precision_of(a) != Precision::bf16) return kernel(x.numel(), x.f32(), 0);
  px::parallel_for(0, x.numel(), kernels::detail::kGrain, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> scratch;
    kernel(hi - lo, at_bf16(x, lo, hi, scratch), lo);
  });
}

// Takes x (input 0) stored in bf16 under bf16; the output stays fp32.
void reads_x_at_bf16(OpDef& d) {
  d.mixed_precision = true;
  d.bf16_inputs = {0};
  d.infer = [infer = d.infer](const std::vector<TensorSpec>& in, const Attrs& a) {
    std::vector<TensorSpec> widened = in;
    if (!widened.empty() && widened[0].dtype == DType::bf16) widened[0].dtype = DType::f32;
    return infer(widened, a);
  };
}

OpDef make_gelu() {
  OpDef d = pointwise_op(
      "gelu", 1, [](int64_t n, const auto& in, float* out) { kernels::gelu(n, in[0], out); }, 8, false);
  reads_x_at_bf16(d);
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    float* y = out[0]->f32();
    over_x(a, *in[0], [&](int64_t n, const float* x, int64_t at) { kernels::gelu(n, x, y + at); });
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("gelu_grad", {n.inputs[0], dout[0]}, {}, n.name + ".grad")};
  };
  return d;
}

OpDef make_gelu_grad() {
  OpDef d = pointwise_op(
      "gelu_grad", 2,
      [](int64_t n, const auto& in, float* out) { kernels::gelu_backward(n, in[0], in[1], out); }, 12,
      true);
  reads_x_at_bf16(d);
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const float* dy = in[1]->f32();
    float* dx = out[0]->f32();
    over_x(a, *in[0], [&](int64_t n, const float* x, int64_t at) { kernels::gelu_backward(n, x, dy + at, dx + at); });
  };
  return d;
}

PX_REGISTER_OP(gelu, make_gelu());
PX_REGISTER_OP(gelu_grad, make_gelu_grad());

}  // namespace
}  // namespace px::ops
