// 2-D convolution, NCHW (see kernels/conv.h).  attrs: stride (1), pad (0).
//   conv2d:      x (N, Ci, H, W), w (Co, Ci, Kh, Kw), b (Co) optional -> y (N, Co, Ho, Wo)
//   conv2d_grad: x, w, dy -> dx, dw, db
// Tensor parallelism splits a convolution as it splits a linear layer:
// out_channel_parallel (column: w S(0), b S(0), y split by channel S(1))
// and in_channel_parallel (row: x and w split by input channel, y a
// partial sum). Under the row split the bias stays whole (a parameter is
// never partial) and is added by the one shard that holds input channel 0,
// so the summands add up to one bias.
#include "graph/ops/op_util.h"
#include "graph/precision.h"
#include "kernels/conv.h"

namespace px::ops {
namespace {

kernels::Conv2dShape conv_shape(const Shape& x, const Shape& w, const Attrs& a) {
  return {.N = x[0], .Ci = x[1], .H = x[2], .W = x[3], .Co = w[0], .Kh = w[2], .Kw = w[3],
          .stride = a.get_int("stride", 1), .pad = a.get_int("pad", 0)};
}

OpDef make_conv2d() {
  OpDef d;
  d.name = "conv2d";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 3);
    const Shape &x = in[0].shape, &w = in[1].shape;
    require(x.rank() == 4 && w.rank() == 4, "x must be (N, C, H, W) and w (Co, Ci, Kh, Kw), got {} and {}", x, w);
    require(x[1] == w[1], "x has {} channels but w {} expects {}", x[1], w, w[1]);
    if (in.size() == 3) require(in[2].shape == Shape({w[0]}), "bias {} must be [{}]", in[2].shape, w[0]);
    auto s = conv_shape(x, w, a);
    require(s.stride >= 1 && s.pad >= 0, "stride {} must be >= 1 and pad {} >= 0", s.stride, s.pad);
    require(s.Ho() >= 1 && s.Wo() >= 1, "kernel {}x{} larger than padded input {}x{}", s.Kh, s.Kw,
            s.H + 2 * s.pad, s.W + 2 * s.pad);
    return std::vector<TensorSpec>{f32({s.N, s.Co, s.Ho(), s.Wo()})};
  };
  // Under bf16 (graph/precision.h) the im2col GEMMs round their operands;
  // x and w are read fp32 (the kernel rounds them: no bf16_inputs, so they
  // are stored and gathered fp32).
  d.mixed_precision = true;
  d.bf16_gemm = true;
  d.forward = [](const OpContext& ctx, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const auto conv = precision_of(a) == Precision::bf16 ? kernels::conv2d_mixed_bf16 : kernels::conv2d;
    // In-channel split: only the shard holding channel 0 adds the bias (the others' outputs are summands).
    const bool bias = in.size() == 3 && ctx.input_box(0).offset_of(1) == 0;
    conv(conv_shape(in[0]->shape(), in[1]->shape(), a), in[0]->f32(), in[1]->f32(), bias ? in[2]->f32() : nullptr,
         out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    auto grads = g.add("conv2d_grad", {n.inputs[0], n.inputs[1], dout[0]}, n.attrs, n.name + ".grad");
    if (n.inputs.size() == 2) grads.pop_back();
    return grads;
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    const Shape& w = in[1].shape;
    c.flops = 2.0 * double(out[0].shape.numel()) * double(w[1] * w[2] * w[3]);
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    bool bias = in.size() == 3;
    auto sig = [&](std::string name, Placement x, Placement w, Placement b, Placement y) {
      PlacementSignature s{std::move(name), {x, w}, {y}};
      if (bias) s.inputs.push_back(b);
      return s;
    };
    auto S0 = Placement::S(0), S1 = Placement::S(1), B = Placement::B(), P = Placement::P();
    return std::vector<PlacementSignature>{sig("data_parallel", S0, B, B, S0),
                                           sig("out_channel_parallel", B, S0, S0, S1),
                                           sig("in_channel_parallel", S1, S1, B, P),
                                           sig("replicated", B, B, B, B)};
  };
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({3, 4, 7, 6}), f32({5, 4, 3, 3}), f32({5})}, {}, {}},
        {{f32({2, 3, 9, 8}), f32({4, 3, 3, 2})}, {{"stride", int64_t{2}}, {"pad", int64_t{1}}}, {}}};
  };
  return d;
}

OpDef make_conv2d_grad() {
  OpDef d;
  d.name = "conv2d_grad";
  d.differentiable_outputs = 3;
  d.mixed_precision = true;  // dx and dw by bf16 GEMMs; db summed from fp32 dy
  d.bf16_gemm = true;
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 3, 3);
    return std::vector<TensorSpec>{in[0], in[1], f32({in[1].shape[0]})};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    out[1]->zero();
    out[2]->zero();
    const auto backward =
        precision_of(a) == Precision::bf16 ? kernels::conv2d_backward_mixed_bf16 : kernels::conv2d_backward;
    backward(conv_shape(in[0]->shape(), in[1]->shape(), a), in[0]->f32(), in[1]->f32(),
                             in[2]->f32(), out[0]->f32(), out[1]->f32(), out[2]->f32());
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    const Shape& w = in[1].shape;
    c.flops = 4.0 * double(in[2].shape.numel()) * double(w[1] * w[2] * w[3]);
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs&) {
    auto S0 = Placement::S(0), S1 = Placement::S(1), B = Placement::B(), P = Placement::P();
    return std::vector<PlacementSignature>{{"data_parallel", {S0, B, S0}, {S0, P, P}},
                                           {"out_channel_parallel", {B, S0, S1}, {P, S0, S0}},
                                           {"in_channel_parallel", {S1, S1, B}, {S1, S1, B}},
                                           {"replicated", {B, B, B}, {B, B, B}}};
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 4, 7, 6}), f32({5, 4, 3, 3}), f32({3, 5, 5, 4})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(conv2d, make_conv2d());
PX_REGISTER_OP(conv2d_grad, make_conv2d_grad());

}  // namespace
}  // namespace px::ops
