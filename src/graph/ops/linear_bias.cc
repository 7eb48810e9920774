// linear_bias: y = x · w + b, a linear layer and its bias add in one node.
//   x (M..., K), w (K, N), b (N) -> y (M..., N)
// Models build the two nodes apart (linear.cc says why); under bf16 the
// lowering fuses them back where the linear's output is whole-featured
// (graph/precision.h, fuse_bias_into_gemms), so oneDNN's matmul adds b in
// its epilogue and, stamped store="bf16", rounds y as it stores it: one
// pass over y instead of the GEMM's, the bias add's and the cast's. Hence
// no row-parallel signature: that partial output would need a partial b.
#include "graph/ops/op_util.h"
#include "graph/precision.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "linear_bias";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 3, 3);
    const Shape &x = in[0].shape, &w = in[1].shape, &b = in[2].shape;
    require(x.rank() >= 1 && w.rank() == 2, "x must have rank >= 1 and weight rank 2, got {} and {}", x, w);
    require(x[-1] == w[0], "x {} has {} features but weight {} expects {}", x, x[-1], w, w[0]);
    require(b == Shape({w[1]}), "bias {} must be [{}], the weight {}'s outputs", b, w[1], w);
    require_dtype(in[2], DType::f32, "the bias");
    return std::vector<TensorSpec>{{with_last(x, w[1]), stores_in_bf16(a) ? DType::bf16 : DType::f32}};
  };
  d.mixed_precision = true;
  d.bf16_gemm = true;
  d.bf16_inputs = {0, 1};  // x and w, as linear's; the bias is added in fp32
  d.stores_bf16 = true;
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t K = in[1]->dim(0), N = in[1]->dim(1), M = rows_of(in[0]->shape());
    const float* bias = in[2]->f32();
    if (precision_of(a) == Precision::bf16) {
      const kernels::Bf16Output y = out[0]->dtype() == DType::bf16
                                        ? kernels::Bf16Output{.rounded = static_cast<kernels::bf16*>(out[0]->raw()), .ld = N}
                                        : kernels::Bf16Output{.f32 = out[0]->f32(), .ld = N};
      kernels::gemm_bias_mixed_bf16(false, false, M, N, K, bf16_operand(*in[0], K), bf16_operand(*in[1], N), bias, y);
      return;
    }
    // fp32 (an fp32 graph is never fused; the op's own tests run it): the GEMM, then the bias in place.
    kernels::gemm(false, false, M, N, K, 1.0f, in[0]->f32(), K, in[1]->f32(), N, 0.0f, out[0]->f32(), N);
    kernels::add_bias(M, N, out[0]->f32(), bias, out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    ValueId x = n.inputs[0], w = n.inputs[1], dy = dout[0];
    return std::vector<ValueId>{
        g.add1("matmul", {dy, w}, {{"trans_b", int64_t{1}}}, n.name + ".grad_x"),
        g.add1("matmul_at_b", {x, dy}, {}, n.name + ".grad_w"),
        g.add1("sum_leading", {dy}, {{"keep", int64_t{1}}}, n.name + ".grad_b")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = 2.0 * double(out[0].shape.numel()) * double(in[0].shape[-1]) + double(out[0].shape.numel());
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < r - 1; ++dim)
      s.push_back({fmt::format("data_parallel_{}", dim), {Placement::S(dim), Placement::B(), Placement::B()},
                   {Placement::S(dim)}});
    s.push_back({"column_parallel", {Placement::B(), Placement::S(1), Placement::S(0)}, {Placement::S(r - 1)}});
    s.push_back({"replicated", {Placement::B(), Placement::B(), Placement::B()}, {Placement::B()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 5, 7}), f32({7, 4}), f32({4})}, {}, {}},
                                  {{f32({13, 6}), f32({6, 5}), f32({5})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(linear_bias, make());

}  // namespace
}  // namespace px::ops
