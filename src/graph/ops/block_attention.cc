// Blocked causal attention for context parallelism's ring (kernels/
// block_attention.h); attrs tokens, parts, balanced (the blocking,
// graph/ops/seq_blocks.cc) and shift (query block p reads key block
// (p - shift) mod parts). Legend: B batch, P blocks,
// L padded block length, H heads, D head dim.
//   block_attention:      qkv (B,P,L,3,H,D), kv (B,P,L,2,H,D) -> out (B,P,L,H,D), lse (B,P,L,H)
//   block_attention_grad: qkv, kv, out, lse, dout, dlse -> dqkv (its q slot), dkv   (the softmax made again from lse)
//   merge_attention:      out_0..out_{n-1}, lse_0..lse_{n-1} -> out (B,P,L,H,D)
//   merge_attention_grad: out_*, lse_*, dout -> dout_0..dout_{n-1}, dlse_0..dlse_{n-1}
// Heads are independent and so are blocks: besides the batch split, a head
// split (tensor parallelism) and the block split over exactly `parts` ranks
// (each its query block and the key block it holds; the box says which).
#include "graph/ops/op_util.h"
#include "kernels/block_attention.h"

namespace px::ops {
namespace {

void require_blocked(const Shape& s, int64_t slots, const char* what) {
  require(s.rank() == 6 && s[3] == slots, "{} must be (B, P, L, {}, H, D), got {}", what, slots, s);
}

kernels::BlockGrid grid_of(const OpContext& ctx, const Attrs& a, const Shape& qkv) {
  return {.B = qkv[0], .P = qkv[1], .L = qkv[2], .H = qkv[4], .D = qkv[5], .tokens = a.get_int("tokens"),
          .parts = a.get_int("parts"), .first = ctx.inputs.empty() ? 0 : ctx.input_box(0).offset_of(1),
          .shift = a.get_int("shift"), .balanced = a.get_int("balanced", 0) != 0};
}

// A block's mean score entries (kernels::mean_block_entries) for qkv `in[0]`.
double block_entries(const std::vector<TensorSpec>& in, const Attrs& a) {
  const Shape& q = in[0].shape;
  const kernels::BlockGrid grid{.B = 1, .P = 1, .L = q[2], .H = 1, .D = 1, .tokens = a.get_int("tokens"),
                                .parts = a.get_int("parts"), .first = 0, .shift = a.get_int("shift"),
                                .balanced = a.get_int("balanced", 0) != 0};
  return kernels::mean_block_entries(grid);
}

// The ways both run split: the batch, the blocks (over exactly `parts`
// ranks) and the heads. Forward's outputs out, lse; backward's extra
// inputs out, lse, dout, dlse and outputs dqkv, dkv.
std::vector<PlacementSignature> block_signatures(size_t extra_inputs, int parts, size_t outputs, bool backward) {
  struct Way {
    const char* name;
    int qkv, out, lse;
  };
  std::vector<PlacementSignature> s{{"replicated", std::vector<Placement>(2 + extra_inputs, Placement::B()),
                                     std::vector<Placement>(outputs, Placement::B())}};
  for (const Way w : {Way{"data_parallel", 0, 0, 0}, Way{"blocks", 1, 1, 1}, Way{"head_parallel", 4, 3, 3}}) {
    std::vector<Placement> in{Placement::S(w.qkv), Placement::S(w.qkv)};
    // Backward's extra inputs: out, lse, dout, dlse.
    for (size_t i = 0; i < extra_inputs; ++i) in.push_back(Placement::S(i % 2 == 0 ? w.out : w.lse));
    std::vector<Placement> out;
    if (backward) out = {Placement::S(w.qkv), Placement::S(w.qkv)};
    else out = {Placement::S(w.out), Placement::S(w.lse)};
    PlacementSignature sig{w.name, in, out};
    if (w.qkv == 1) sig.ranks = parts;
    s.push_back(sig);
  }
  return s;
}

OpDef make_block_attention() {
  OpDef d;
  d.name = "block_attention";
  d.differentiable_outputs = 2;  // out and lse
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 2);
    const Shape& q = in[0].shape;
    require_blocked(q, 3, "qkv");
    require_blocked(in[1].shape, 2, "kv");
    require(in[1].shape[0] == q[0] && in[1].shape[1] == q[1] && in[1].shape[2] == q[2] && in[1].shape[4] == q[4] &&
                in[1].shape[5] == q[5],
            "kv {} does not pair with qkv {}", in[1].shape, q);
    require(a.get_int("parts") >= 1, "parts {} must be >= 1", a.get_int("parts"));
    return std::vector<TensorSpec>{f32({q[0], q[1], q[2], q[4], q[5]}), f32({q[0], q[1], q[2], q[4]})};
  };
  d.forward = [](const OpContext& ctx, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    kernels::block_attention(grid_of(ctx, a, in[0]->shape()), in[0]->f32(), in[1]->f32(), out[0]->f32(),
                             out[1]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    ValueId dlse = dout[1];
    if (dlse == kNoValue)
      dlse = g.add1("fill", {}, {{"value", 0.0}, {"shape", g.spec(n.outputs[1]).shape.dims()}}, n.name + ".dlse");
    const std::vector<ValueId> grads =
        g.add("block_attention_grad", {n.inputs[0], n.inputs[1], n.outputs[0], n.outputs[1], dout[0], dlse}, n.attrs, n.name + ".grad");
    return grads;
  };
  d.cost = [](const auto& in, const auto& out, const Attrs& a) {
    const Shape& q = in[0].shape;
    OpCost c = streaming_cost(in, out);
    // Two products per block and head over the score entries the mask lets
    // through, a block's mean: which block a shard holds the cost does not know.
    c.flops = 4.0 * double(q[0] * q[1] * q[4]) * block_entries(in, a) * double(q[5]);
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs& a) {
    return block_signatures(0, static_cast<int>(a.get_int("parts")), 2, false);
  };
  d.examples = [] {
    auto attrs = [](int64_t shift) {
      return Attrs{{"tokens", int64_t{7}}, {"parts", int64_t{3}}, {"shift", shift}};
    };
    // 11 tokens in zigzag blocks of 3, 4 and 4 (padded to 4).
    auto balanced = [](int64_t shift) {
      return Attrs{{"tokens", int64_t{11}}, {"parts", int64_t{3}}, {"shift", shift}, {"balanced", int64_t{1}}};
    };
    return std::vector<OpExample>{{{f32({2, 3, 3, 3, 2, 4}), f32({2, 3, 3, 2, 2, 4})}, attrs(0), {}},
                                  {{f32({1, 3, 3, 3, 2, 3}), f32({1, 3, 3, 2, 2, 3})}, attrs(1), {}},
                                  {{f32({1, 3, 3, 3, 1, 4}), f32({1, 3, 3, 2, 1, 4})}, attrs(2), {}},
                                  {{f32({1, 3, 4, 3, 2, 3}), f32({1, 3, 4, 2, 2, 3})}, balanced(1), {}},
                                  {{f32({1, 3, 4, 3, 1, 4}), f32({1, 3, 4, 2, 1, 4})}, balanced(0), {}}};
  };
  return d;
}

OpDef make_block_attention_grad() {
  OpDef d;
  d.name = "block_attention_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 6, 6);
    require_blocked(in[0].shape, 3, "qkv");
    require_blocked(in[1].shape, 2, "kv");
    return std::vector<TensorSpec>{f32(in[0].shape), f32(in[1].shape)};
  };
  d.forward = [](const OpContext& ctx, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    kernels::block_attention_backward(grid_of(ctx, a, in[0]->shape()), in[0]->f32(), in[1]->f32(), in[2]->f32(),
                                      in[3]->f32(), in[4]->f32(), in[5]->f32(), out[0]->f32(), out[1]->f32());
  };
  d.cost = [](const auto& in, const auto& out, const Attrs& a) {
    const Shape& q = in[0].shape;
    OpCost c = streaming_cost(in, out);
    c.flops = 8.0 * double(q[0] * q[1] * q[4]) * block_entries(in, a) * double(q[5]);
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs& a) {
    return block_signatures(4, static_cast<int>(a.get_int("parts")), 2, true);
  };
  d.examples = [] {
    const Attrs attrs{{"tokens", int64_t{7}}, {"parts", int64_t{3}}, {"shift", int64_t{1}}};
    const Attrs balanced{{"tokens", int64_t{11}}, {"parts", int64_t{3}}, {"shift", int64_t{2}}, {"balanced", int64_t{1}}};
    return std::vector<OpExample>{{{f32({1, 3, 3, 3, 2, 4}), f32({1, 3, 3, 2, 2, 4}), f32({1, 3, 3, 2, 4}),
                                    f32({1, 3, 3, 2}), f32({1, 3, 3, 2, 4}), f32({1, 3, 3, 2})},
                                   attrs,
                                   {}},
                                  {{f32({1, 3, 4, 3, 2, 3}), f32({1, 3, 4, 2, 2, 3}), f32({1, 3, 4, 2, 3}),
                                    f32({1, 3, 4, 2}), f32({1, 3, 4, 2, 3}), f32({1, 3, 4, 2})},
                                   balanced,
                                   {}}};
  };
  return d;
}

// The n parts' outputs, then their lse.
size_t parts_of(size_t inputs) { return inputs / 2; }

std::vector<PlacementSignature> merge_signatures(size_t inputs, size_t outputs) {
  std::vector<PlacementSignature> s{{"replicated", std::vector<Placement>(inputs, Placement::B()),
                                     std::vector<Placement>(outputs, Placement::B())}};
  for (int dim = 0; dim < 4; ++dim)
    s.push_back({fmt::format("split_{}", dim), std::vector<Placement>(inputs, Placement::S(dim)),
                 std::vector<Placement>(outputs, Placement::S(dim))});
  return s;
}

OpDef make_merge_attention() {
  OpDef d;
  d.name = "merge_attention";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require(in.size() >= 2 && in.size() % 2 == 0, "takes n outputs and their n lse, got {} inputs", in.size());
    const size_t n = parts_of(in.size());
    const Shape& o = in[0].shape;
    require(o.rank() == 5, "out must be (B, P, L, H, D), got {}", o);
    for (size_t j = 0; j < n; ++j) {
      require(in[j].shape == o, "part {} is {}, part 0 {}", j, in[j].shape, o);
      require(in[n + j].shape == Shape({o[0], o[1], o[2], o[3]}), "lse {} is {}, expected (B, P, L, H) of {}", j,
              in[n + j].shape, o);
    }
    return std::vector<TensorSpec>{f32(o)};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const size_t n = parts_of(in.size());
    const Shape& o = in[0]->shape();
    std::vector<const float*> parts, lse;
    for (size_t j = 0; j < n; ++j) parts.push_back(in[j]->f32()), lse.push_back(in[n + j]->f32());
    kernels::merge_attention(o[0] * o[1] * o[2], o[3], o[4], parts, lse, out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    std::vector<ValueId> inputs = n.inputs;
    inputs.push_back(dout[0]);
    return g.add("merge_attention_grad", inputs, {}, n.name + ".grad");
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) { return merge_signatures(in.size(), 1); };
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({2, 1, 3, 2, 4}), f32({2, 1, 3, 2, 4}), f32({2, 1, 3, 2}), f32({2, 1, 3, 2})}, {}, {}}};
  };
  return d;
}

OpDef make_merge_attention_grad() {
  OpDef d;
  d.name = "merge_attention_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require(in.size() >= 3 && in.size() % 2 == 1, "takes n outputs, their n lse and dout, got {} inputs", in.size());
    std::vector<TensorSpec> out(in.begin(), in.end() - 1);
    return out;
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const size_t n = parts_of(in.size() - 1);
    const Shape& o = in[0]->shape();
    std::vector<const float*> parts, lse;
    std::vector<float*> dparts, dlse;
    for (size_t j = 0; j < n; ++j) {
      parts.push_back(in[j]->f32()), lse.push_back(in[n + j]->f32());
      dparts.push_back(out[j]->f32()), dlse.push_back(out[n + j]->f32());
    }
    kernels::merge_attention_backward(o[0] * o[1] * o[2], o[3], o[4], parts, lse, in.back()->f32(), dparts, dlse);
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return merge_signatures(in.size(), in.size() - 1);
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({2, 1, 3, 2, 4}), f32({2, 1, 3, 2, 4}), f32({2, 1, 3, 2}), f32({2, 1, 3, 2}),
                                    f32({2, 1, 3, 2, 4})},
                                   {},
                                   {}}};
  };
  return d;
}

PX_REGISTER_OP(block_attention, make_block_attention());
PX_REGISTER_OP(block_attention_grad, make_block_attention_grad());
PX_REGISTER_OP(merge_attention, make_merge_attention());
PX_REGISTER_OP(merge_attention_grad, make_merge_attention_grad());

}  // namespace
}  // namespace px::ops
