// moe_router: a mixture-of-experts layer's router logits, always in fp32.
//   x (L..., C), w (C, E) -> logits (L..., E)
// Not a linear: it has no bf16 path (routing decided on rounded operands
// flips choices near ties), its kernel sums each row in a fixed order so a
// row's logits are the same bits under any split of the rows, and it offers
// no tensor-parallel signature: the router is never split.
#include "graph/ops/op_util.h"
#include "kernels/moe.h"

namespace px::ops {
namespace {

OpDef make_moe_router() {
  OpDef d;
  d.name = "moe_router";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    const Shape &x = in[0].shape, &w = in[1].shape;
    require(x.rank() >= 1 && w.rank() == 2, "x must have rank >= 1 and the router weight rank 2, got {} and {}", x, w);
    require(x[-1] == w[0], "x {} has {} features but the router weight {} expects {}", x, x[-1], w, w[0]);
    return std::vector<TensorSpec>{f32(with_last(x, w[1]))};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    kernels::moe_router_logits(rows_of(in[0]->shape()), in[1]->dim(0), in[1]->dim(1), in[0]->f32(), in[1]->f32(),
                               out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const ValueId x = n.inputs[0], w = n.inputs[1], dlogits = dout[0];
    return std::vector<ValueId>{g.add1("matmul", {dlogits, w}, {{"trans_b", int64_t{1}}}, n.name + ".grad_x"),
                                g.add1("matmul_at_b", {x, dlogits}, {}, n.name + ".grad_w")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = 2.0 * double(out[0].shape.numel()) * double(in[0].shape[-1]);
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim + 1 < in[0].shape.rank(); ++dim)
      s.push_back({fmt::format("data_parallel_{}", dim), {Placement::S(dim), Placement::B()}, {Placement::S(dim)}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 5, 7}), f32({7, 4})}, {}, {}}, {{f32({6, 8}), f32({8, 3})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(moe_router, make_moe_router());

}  // namespace
}  // namespace px::ops
