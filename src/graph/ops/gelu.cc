// gelu: GPT-2's tanh approximation.  gelu_grad: dx from the saved input x and dy.
// Under bf16 both read x at bf16 precision, as PyTorch's autocast does (the
// GEMM before it yields bf16 there): x may then be stored in bf16 (the
// lowering does, it being read by nothing else), and an fp32 x is rounded
// as it is read, so storing it changes no result. gelu may also be stamped
// to store its output in bf16 (read only by the next GEMM: precision.h).
#include <vector>

#include "core/thread_pool.h"
#include "graph/ops/op_util.h"
#include "graph/precision.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "kernels/grain.h"

namespace px::ops {
namespace {

// An fp32 x under bf16 (not stored in bf16: a graph the lowering did not
// rewrite): x's elements [lo, hi) rounded to bf16 and widened, into `scratch`.
const float* rounded(const Tensor& x, int64_t lo, int64_t hi, std::vector<float>& scratch) {
  scratch.resize(static_cast<size_t>(hi - lo));
  for (int64_t i = lo; i < hi; ++i)
    scratch[static_cast<size_t>(i - lo)] = kernels::to_float(kernels::to_bf16(x.f32()[i]));
  return scratch.data();
}

// `kernel(count, x, offset)` over x read at the node's precision: fp32 x
// as it is, bf16-stored x straight from its storage (the kernels widen it
// as they load), and an fp32 x under bf16 rounded in chunks first.
template <typename Kernel>
void over_x(const Attrs& a, const Tensor& x, Kernel kernel) {
  if (x.dtype() == DType::bf16) return kernel(x.numel(), static_cast<const kernels::bf16*>(x.raw()), 0);
  if (precision_of(a) != Precision::bf16) return kernel(x.numel(), x.f32(), 0);
  px::parallel_for(0, x.numel(), kernels::detail::kGrain, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> scratch;
    kernel(hi - lo, rounded(x, lo, hi, scratch), lo);
  });
}

// Takes x (input 0) stored in bf16 under bf16; the output is fp32 unless
// the node is stamped to store it in bf16.
void reads_x_at_bf16(OpDef& d) {
  d.mixed_precision = true;
  d.bf16_inputs = {0};
  d.infer = [infer = d.infer](const std::vector<TensorSpec>& in, const Attrs& a) {
    std::vector<TensorSpec> widened = in;
    if (!widened.empty() && widened[0].dtype == DType::bf16) widened[0].dtype = DType::f32;
    std::vector<TensorSpec> out = infer(widened, a);
    if (stores_in_bf16(a)) out[0].dtype = DType::bf16;
    return out;
  };
}

OpDef make_gelu() {
  OpDef d = pointwise_op(
      "gelu", 1, [](int64_t n, const auto& in, float* out) { kernels::gelu(n, in[0], out); }, 8, false);
  reads_x_at_bf16(d);
  d.stores_bf16 = true;
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t count = in[0]->numel();
    if (out[0]->dtype() != DType::bf16) {
      float* y = out[0]->f32();
      over_x(a, *in[0], [&](int64_t n, const auto* x, int64_t at) { kernels::gelu(n, x, y + at); });
    } else if (in[0]->dtype() == DType::bf16) {  // the GPT's MLP: one pass, bf16 in and out
      kernels::gelu(count, static_cast<const kernels::bf16*>(in[0]->raw()),
                    static_cast<kernels::bf16*>(out[0]->raw()));
    } else {  // x kept fp32 for another reader: fp32 y, then narrowed
      std::vector<float> y(static_cast<size_t>(count));
      over_x(a, *in[0], [&](int64_t n, const auto* x, int64_t at) { kernels::gelu(n, x, y.data() + at); });
      kernels::to_bf16(count, y.data(), static_cast<kernels::bf16*>(out[0]->raw()));
    }
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
    over_x(a, *in[0],
           [&](int64_t n, const auto* x, int64_t at) { kernels::gelu_backward(n, x, dy + at, dx + at); });
  };
  return d;
}

PX_REGISTER_OP(gelu, make_gelu());
PX_REGISTER_OP(gelu_grad, make_gelu_grad());

}  // namespace
}  // namespace px::ops
