// gelu: GPT-2's tanh approximation.  gelu_grad: dx from the saved input x and dy.
// gelu_grad_bias: gelu_grad's dx and its column sums (sum_leading keep=1),
//   x (M..., N), dy (M..., N) -> dx (M..., N), db (N): the gradient of a
//   bf16 linear's output and of its bias in one pass. Only the lowering
//   makes it (precision.h, fuse_bias_gradients_into_gelu_grad), stamped to
//   store dx in bf16 for the linear's two GEMMs; db sums the fp32 dx.
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

OpDef make_gelu_grad_bias() {
  OpDef d;
  d.name = "gelu_grad_bias";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 2);
    require_dtype(in[1], DType::f32, "dy");
    const Shape& x = in[0].shape;
    require(x.rank() >= 1 && in[1].shape == x, "x {} and dy {} must have one shape", x, in[1].shape);
    return std::vector<TensorSpec>{{x, stores_in_bf16(a) ? DType::bf16 : DType::f32}, f32(Shape({x[-1]}))};
  };
  d.mixed_precision = true;
  d.bf16_inputs = {0};
  d.stores_bf16 = true;
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t cols = in[0]->shape()[-1], rows = rows_of(in[0]->shape());
    const float* dy = in[1]->f32();
    float* db = out[1]->f32();
    const bool narrow_dx = out[0]->dtype() == DType::bf16;
    std::vector<kernels::bf16> x_rounded;  // an fp32 x under bf16 (a graph the lowering did not rewrite)
    const kernels::bf16* x_bf16 = in[0]->dtype() == DType::bf16 ? static_cast<const kernels::bf16*>(in[0]->raw())
                                                                 : nullptr;
    if (x_bf16 == nullptr && precision_of(a) == Precision::bf16) {
      x_rounded.resize(static_cast<size_t>(in[0]->numel()));
      kernels::to_bf16(in[0]->numel(), in[0]->f32(), x_rounded.data());
      x_bf16 = x_rounded.data();
    }
    if (x_bf16 != nullptr && narrow_dx)
      return kernels::gelu_backward_bias(rows, cols, x_bf16, dy, static_cast<kernels::bf16*>(out[0]->raw()), db);
    std::vector<float> wide;  // dx in fp32 first when it is stored in bf16
    if (narrow_dx) wide.resize(static_cast<size_t>(in[0]->numel()));
    float* dx = narrow_dx ? wide.data() : out[0]->f32();
    if (x_bf16 != nullptr) kernels::gelu_backward_bias(rows, cols, x_bf16, dy, dx, db);
    else kernels::gelu_backward_bias(rows, cols, in[0]->f32(), dy, dx, db);
    if (narrow_dx) kernels::to_bf16(in[0]->numel(), wide.data(), static_cast<kernels::bf16*>(out[0]->raw()));
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 13); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    const int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < r - 1; ++dim)  // rows split: each rank sums its rows
      s.push_back({fmt::format("split_{}", dim), {Placement::S(dim), Placement::S(dim)},
                   {Placement::S(dim), Placement::P()}});
    s.push_back({"split_features", {Placement::S(r - 1), Placement::S(r - 1)}, {Placement::S(r - 1), Placement::S(0)}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B(), Placement::B()}});
    s.push_back({"partial_grad", {Placement::B(), Placement::P()}, {Placement::P(), Placement::P()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 5, 7}), f32({3, 5, 7})}, {}, {}}, {{f32({13, 6}), f32({13, 6})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(gelu, make_gelu());
PX_REGISTER_OP(gelu_grad, make_gelu_grad());
PX_REGISTER_OP(gelu_grad_bias, make_gelu_grad_bias());

}  // namespace
}  // namespace px::ops
