// The blocked layout of context parallelism's ring (kernels/block_attention.h):
// a sequence of `tokens` cut into `parts` blocks by core/block.h's rule, each
// padded with zeros to the longest, L = block(tokens, parts, 0).count.
//   to_blocks:   x (B, T, Z...) -> (B, parts, L, Z...)
//   from_blocks: y (B, parts, L, Z...) -> (B, T, Z...)   (the padding dropped)
// Each is the other's gradient. Split along the sequence by the same rule
// over exactly `parts` ranks (S(1) -> S(1)), a rank's tokens are exactly its
// block: no data moves. On a shard, `held` is the blocks (to_blocks) or the
// tokens (from_blocks) it has, and the boxes say which.
#include <cstring>

#include "core/block.h"
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

int64_t padded_length(const Attrs& a) {
  return block(a.get_int("tokens"), static_cast<int>(a.get_int("parts")), 0).count;
}

void require_blocking(const Attrs& a) {
  require(a.get_int("parts") >= 1 && a.get_int("tokens") >= a.get_int("parts"),
          "{} tokens cannot be cut into {} blocks of at least one", a.get_int("tokens"), a.get_int("parts"));
}

// Copies the held blocks' tokens between the sequence layout (tokens from
// global `first_token`) and the blocked one (blocks from `first_block`).
// `inner` floats a token; `outer` = B.
void copy_tokens(const Attrs& a, int64_t outer, int64_t inner, int64_t seq_tokens, int64_t first_token,
                 int64_t blocks, int64_t first_block, const float* src, float* dst, bool to_blocked) {
  const int64_t L = padded_length(a), T = a.get_int("tokens");
  const int parts = static_cast<int>(a.get_int("parts"));
  for (int64_t b = 0; b < outer; ++b)
    for (int64_t p = 0; p < blocks; ++p) {
      const Block tok = block(T, parts, static_cast<int>(first_block + p));
      const int64_t local = tok.begin - first_token;
      PX_CHECK(local >= 0 && local + tok.count <= seq_tokens, "block {} ({} tokens at {}) is not among tokens [{}, {})",
               first_block + p, tok.count, tok.begin, first_token, first_token + seq_tokens);
      const int64_t blocked = (b * blocks + p) * L * inner, sequence = (b * seq_tokens + local) * inner;
      const size_t bytes = static_cast<size_t>(tok.count * inner) * sizeof(float);
      if (to_blocked) {
        std::memcpy(dst + blocked, src + sequence, bytes);
        std::memset(dst + blocked + tok.count * inner, 0, static_cast<size_t>((L - tok.count) * inner) * sizeof(float));
      } else {
        std::memcpy(dst + sequence, src + blocked, bytes);
      }
    }
}

// On a shard: the blocks (to_blocks) or tokens (from_blocks) it holds.
Attrs localize_held(const Attrs& a, const std::vector<TensorSpec>&, const std::vector<TensorSpec>& out) {
  Attrs local = a;
  local.set("held", out[0].shape[1]);
  return local;
}

// Signatures shared by both (`rank`: the sequence side's): the batch and
// the feature dims split alike (a feature dim d is d + 1 on the blocked
// side), the sequence split into exactly its blocks, B, P.
std::vector<PlacementSignature> blocking_signatures(int rank, int parts, bool to_blocked) {
  std::vector<PlacementSignature> s{{"replicated", {Placement::B()}, {Placement::B()}},
                                    {"partial", {Placement::P()}, {Placement::P()}},
                                    {"split_0", {Placement::S(0)}, {Placement::S(0)}}};
  PlacementSignature blocks{"sequence_blocks", {Placement::S(1)}, {Placement::S(1)}};
  blocks.ranks = parts;
  s.push_back(blocks);
  for (int d = 2; d < rank; ++d) {
    const Placement sequence = Placement::S(d), blocked = Placement::S(d + 1);
    s.push_back({fmt::format("split_{}", d), {to_blocked ? sequence : blocked}, {to_blocked ? blocked : sequence}});
  }
  return s;
}

OpDef make_to_blocks() {
  OpDef d;
  d.name = "to_blocks";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "x");
    require_blocking(a);
    const Shape& x = in[0].shape;
    require(x.rank() >= 2, "x must be (B, T, ...), got {}", x);
    const int64_t held = a.get_int("held", a.get_int("parts"));
    require(x[1] <= held * padded_length(a), "{} tokens do not fit {} blocks of {}", x[1], held, padded_length(a));
    std::vector<int64_t> y{x[0], held, padded_length(a)};
    for (int i = 2; i < x.rank(); ++i) y.push_back(x[i]);
    return std::vector<TensorSpec>{f32(Shape(y))};
  };
  d.forward = [](const OpContext& ctx, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Shape& x = in[0]->shape();
    const int64_t first_token = ctx.inputs.empty() ? 0 : ctx.input_box(0).offset_of(1);
    const int64_t first_block = ctx.outputs.empty() ? 0 : ctx.output_box(0).offset_of(1);
    copy_tokens(a, x[0], x.numel(2, x.rank()), x[1], first_token, out[0]->shape()[1], first_block, in[0]->f32(),
                out[0]->f32(), true);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    Attrs attrs{{"tokens", n.attrs.get_int("tokens")}, {"parts", n.attrs.get_int("parts")}};
    return std::vector<ValueId>{g.add1("from_blocks", {dout[0]}, attrs, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    return blocking_signatures(in[0].shape.rank(), static_cast<int>(a.get_int("parts")), true);
  };
  d.localize = localize_held;
  d.examples = [] {
    return std::vector<OpExample>{{{f32({2, 7, 3})}, {{"tokens", int64_t{7}}, {"parts", int64_t{3}}}, {}},
                                  {{f32({3, 8, 2, 2})}, {{"tokens", int64_t{8}}, {"parts", int64_t{2}}}, {}}};
  };
  return d;
}

OpDef make_from_blocks() {
  OpDef d;
  d.name = "from_blocks";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "y");
    require_blocking(a);
    const Shape& y = in[0].shape;
    require(y.rank() >= 3 && y[2] == padded_length(a), "y must be (B, blocks, {}, ...), got {}", padded_length(a), y);
    std::vector<int64_t> x{y[0], a.get_int("held", a.get_int("tokens"))};
    for (int i = 3; i < y.rank(); ++i) x.push_back(y[i]);
    return std::vector<TensorSpec>{f32(Shape(x))};
  };
  d.forward = [](const OpContext& ctx, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Shape& x = out[0]->shape();
    const int64_t first_token = ctx.outputs.empty() ? 0 : ctx.output_box(0).offset_of(1);
    const int64_t first_block = ctx.inputs.empty() ? 0 : ctx.input_box(0).offset_of(1);
    copy_tokens(a, x[0], x.numel(2, x.rank()), x[1], first_token, in[0]->shape()[1], first_block, in[0]->f32(),
                out[0]->f32(), false);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    Attrs attrs{{"tokens", n.attrs.get_int("tokens")}, {"parts", n.attrs.get_int("parts")}};
    return std::vector<ValueId>{g.add1("to_blocks", {dout[0]}, attrs, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    return blocking_signatures(in[0].shape.rank() - 1, static_cast<int>(a.get_int("parts")), false);
  };
  d.localize = localize_held;
  d.examples = [] {
    return std::vector<OpExample>{{{f32({2, 3, 3, 3})}, {{"tokens", int64_t{7}}, {"parts", int64_t{3}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(to_blocks, make_to_blocks());
PX_REGISTER_OP(from_blocks, make_from_blocks());

}  // namespace
}  // namespace px::ops
