// linear: y = x · w (GPT-2 Conv1D layout: w is (in, out)).
//   x (M..., K), w (K, N) -> y (M..., N)
// A layer's bias is a separate bias_add after it: with the bias inside, the
// row-parallel signature (P out) needed a partial bias, which no placement
// of a bias parameter gives soundly.
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "linear";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    const Shape &x = in[0].shape, &w = in[1].shape;
    require(x.rank() >= 1 && w.rank() == 2, "x must have rank >= 1 and weight rank 2, got {} and {}", x, w);
    require(x[-1] == w[0], "x {} has {} features but weight {} expects {}", x, x[-1], w, w[0]);
    return std::vector<TensorSpec>{f32(with_last(x, w[1]))};
  };
  d.mixed_precision = true;
  d.bf16_gemm = true;
  d.bf16_inputs = {0, 1};  // both operands are rounded: x, and w (ZeRO-3 may gather it in bf16)
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    int64_t K = in[1]->dim(0), N = in[1]->dim(1), M = rows_of(in[0]->shape());
    gemm(a, false, false, M, N, K, *in[0], K, *in[1], N, out[0]->f32(), N);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    ValueId x = n.inputs[0], w = n.inputs[1], dy = dout[0];
    return std::vector<ValueId>{
        g.add1("matmul", {dy, w}, {{"trans_b", int64_t{1}}}, n.name + ".grad_x"),
        g.add1("matmul_at_b", {x, dy}, {}, n.name + ".grad_w")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = 2.0 * double(out[0].shape.numel()) * double(in[0].shape[-1]);  // 2·M·N·K
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < r - 1; ++dim)
      s.push_back({fmt::format("data_parallel_{}", dim), {Placement::S(dim), Placement::B()},
                   {Placement::S(dim)}});
    s.push_back({"column_parallel", {Placement::B(), Placement::S(1)}, {Placement::S(r - 1)}});
    s.push_back({"row_parallel", {Placement::S(r - 1), Placement::S(0)}, {Placement::P()}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 5, 7}), f32({7, 4})}, {}, {}},
                                  {{f32({13, 6}), f32({6, 5})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(linear, make());

}  // namespace
}  // namespace px::ops
