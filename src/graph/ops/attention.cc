// Multi-head self-attention on fused q,k,v without the T x T matrix (see
// kernels/attention.h); attr causal (default 1). Legend: B batch, T time,
// H heads, D head dim.
//   attention:      qkv (B, T, 3, H, D)   -> out (B, T, H, D), lse (B, H, T)
//   attention_grad: qkv, out, lse, dout   -> dqkv (B, T, 3, H, D)   (the softmax made again from lse)
// Heads are independent, so besides the batch split there is a head split
// (Megatron's attention tensor parallelism): S(3) on qkv -> S(2) on out,
// S(1) on lse.
#include "graph/ops/op_util.h"
#include "graph/precision.h"
#include "kernels/attention.h"

namespace px::ops {
namespace {

void require_qkv(const Shape& s) {
  require(s.rank() == 5 && s[2] == 3, "qkv must be (B, T, 3, H, D), got {}", s);
}

kernels::AttentionDims dims_of(const Shape& qkv, const Attrs& a) {
  return {.B = qkv[0], .T = qkv[1], .H = qkv[3], .D = qkv[4], .causal = a.get_int("causal", 1) != 0};
}

OpDef make_attention() {
  OpDef d;
  d.name = "attention";
  d.attention_core = true;
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 1, 1);
    const Shape& q = in[0].shape;
    require_qkv(q);
    return std::vector<TensorSpec>{f32({q[0], q[1], q[3], q[4]}), f32({q[0], q[3], q[1]})};
  };
  // bf16: the products read q, k, v at bf16 precision (kernels::attention_bf16),
  // and qkv, read only by this node and its gradient, is stored in bf16.
  d.mixed_precision = true;
  d.bf16_inputs = {0};
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const kernels::AttentionDims dims = dims_of(in[0]->shape(), a);
    if (precision_of(a) == Precision::bf16)
      return kernels::attention_bf16(dims, bf16_operand(*in[0]), out[0]->f32(), out[1]->f32());
    kernels::attention(dims, in[0]->f32(), out[0]->f32(), out[1]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("attention_grad", {n.inputs[0], n.outputs[0], n.outputs[1], dout[0]},
                                       n.attrs, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    const Shape& q = in[0].shape;
    OpCost c = streaming_cost(in, out);
    // Two (T x T x D) products per head, counted whole as peers and MFU
    // figures count them. The kernel skips the tiles the causal mask hides
    // and its backward makes the scores again: the calibrated attention
    // rate (plan/assumptions.h) takes in both.
    c.flops = 4.0 * double(q[0] * q[3]) * double(q[1] * q[1]) * double(q[4]);
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs&) {
    return std::vector<PlacementSignature>{
        {"data_parallel", {Placement::S(0)}, {Placement::S(0), Placement::S(0)}},
        {"head_parallel", {Placement::S(3)}, {Placement::S(2), Placement::S(1)}},
        {"replicated", {Placement::B()}, {Placement::B(), Placement::B()}}};
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({2, 5, 3, 3, 4})}, {}, {}},
                                  {{f32({3, 7, 3, 2, 3})}, {}, {}},
                                  {{f32({2, 6, 3, 2, 4})}, {{"causal", int64_t{0}}}, {}}};
  };
  return d;
}

OpDef make_attention_grad() {
  OpDef d;
  d.name = "attention_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 4, 4);
    require_qkv(in[0].shape);
    return std::vector<TensorSpec>{f32(in[0].shape)};
  };
  // bf16: qkv and out may come stored in bf16.
  d.mixed_precision = true;
  d.bf16_inputs = {0, 1};
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const kernels::AttentionDims dims = dims_of(in[0]->shape(), a);
    if (precision_of(a) == Precision::bf16)
      return kernels::attention_backward_bf16(dims, bf16_operand(*in[0]), bf16_operand(*in[1]), in[2]->f32(),
                                              in[3]->f32(), out[0]->f32());
    kernels::attention_backward(dims, in[0]->f32(), in[1]->f32(), in[2]->f32(), in[3]->f32(), out[0]->f32());
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    const Shape& q = in[0].shape;
    OpCost c = streaming_cost(in, out);
    c.flops = 8.0 * double(q[0] * q[3]) * double(q[1] * q[1]) * double(q[4]);  // counted as forward's
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs&) {
    return std::vector<PlacementSignature>{
        {"data_parallel", {Placement::S(0), Placement::S(0), Placement::S(0), Placement::S(0)}, {Placement::S(0)}},
        {"head_parallel", {Placement::S(3), Placement::S(2), Placement::S(1), Placement::S(2)}, {Placement::S(3)}},
        {"replicated", {Placement::B(), Placement::B(), Placement::B(), Placement::B()}, {Placement::B()}}};
  };
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({2, 5, 3, 3, 4}), f32({2, 5, 3, 4}), f32({2, 3, 5}), f32({2, 5, 3, 4})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(attention, make_attention());
PX_REGISTER_OP(attention_grad, make_attention_grad());

}  // namespace
}  // namespace px::ops
