// The blocked layout of context parallelism's ring (kernels/block_attention.h):
// a sequence of `tokens` cut into `parts` blocks by core/block.h's rule —
// with `balanced` its zigzag rule, block p the tokens of 2·parts blocks p
// and 2·parts-1-p — each padded with zeros to the longest, L.
//   to_blocks:   x (B, T, Z...) -> (B, parts, L, Z...)
//   from_blocks: y (B, parts, L, Z...) -> (B, T, Z...)   (the padding dropped)
// Each is the other's gradient. Split along the sequence by the same rule
// over exactly `parts` ranks (S(1) -> S(1), balanced Z(1) -> S(1)), a
// rank's tokens are exactly its block: no data moves. On a shard, `held`
// is the blocks (to_blocks) or the tokens (from_blocks) it has, and the
// boxes say which.
#include <algorithm>
#include <cstring>

#include "core/block.h"
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

// Block p's runs of tokens, in the order the block holds them.
std::vector<Block> block_runs(const Attrs& a, int64_t p) {
  const int64_t T = a.get_int("tokens");
  const int parts = static_cast<int>(a.get_int("parts"));
  if (a.get_int("balanced", 0) == 0) return {block(T, parts, static_cast<int>(p))};
  const ZigzagBlock z = zigzag_block(T, parts, static_cast<int>(p));
  return {z.early, z.late};
}

int64_t padded_length(const Attrs& a) {
  int64_t longest = 0;
  for (int64_t p = 0; p < a.get_int("parts"); ++p) {
    int64_t n = 0;
    for (const Block& run : block_runs(a, p)) n += run.count;
    longest = std::max(longest, n);
  }
  return longest;
}

void require_blocking(const Attrs& a) {
  require(a.get_int("parts") >= 1 && a.get_int("tokens") >= a.get_int("parts"),
          "{} tokens cannot be cut into {} blocks of at least one", a.get_int("tokens"), a.get_int("parts"));
}

// Copies the held blocks' tokens between the sequence layout (`sequence`
// places its tokens) and the blocked one (blocks from `first_block`).
// `inner` floats a token; `outer` = B.
void copy_tokens(const Attrs& a, int64_t outer, int64_t inner, int64_t seq_tokens, const ShardBox& sequence,
                 int64_t blocks, int64_t first_block, const float* src, float* dst, bool to_blocked) {
  const int64_t L = padded_length(a);
  for (int64_t p = 0; p < blocks; ++p) {
    int64_t at = 0;  // the run's first token in the block
    for (const Block& run : block_runs(a, first_block + p)) {
      const int64_t local = sequence.local_index(1, run.begin);
      PX_CHECK(run.count == 0 || (local >= 0 && local + run.count <= seq_tokens),
               "block {}: its {} tokens at {} are not among the {} held", first_block + p, run.count, run.begin,
               seq_tokens);
      for (int64_t b = 0; b < outer; ++b) {
        const int64_t blocked = ((b * blocks + p) * L + at) * inner, tokens = (b * seq_tokens + local) * inner;
        const size_t bytes = static_cast<size_t>(run.count * inner) * sizeof(float);
        if (to_blocked) std::memcpy(dst + blocked, src + tokens, bytes);
        else std::memcpy(dst + tokens, src + blocked, bytes);
      }
      at += run.count;
    }
    if (to_blocked)
      for (int64_t b = 0; b < outer; ++b)
        std::memset(dst + ((b * blocks + p) * L + at) * inner, 0, static_cast<size_t>((L - at) * inner) * sizeof(float));
  }
}

// The blocking's attributes, for the gradient's op (not `held`: it is localized again).
Attrs blocking_attrs(const Attrs& a) {
  return {{"tokens", a.get_int("tokens")}, {"parts", a.get_int("parts")}, {"balanced", a.get_int("balanced", 0)}};
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
std::vector<PlacementSignature> blocking_signatures(int rank, int parts, bool balanced, bool to_blocked) {
  std::vector<PlacementSignature> s{{"replicated", {Placement::B()}, {Placement::B()}},
                                    {"partial", {Placement::P()}, {Placement::P()}},
                                    {"split_0", {Placement::S(0)}, {Placement::S(0)}}};
  const Placement sequence = balanced ? Placement::Z(1) : Placement::S(1);
  PlacementSignature blocks{"sequence_blocks", {to_blocked ? sequence : Placement::S(1)},
                            {to_blocked ? Placement::S(1) : sequence}};
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
    const int64_t first_block = ctx.output_box(0).offset_of(1);
    copy_tokens(a, x[0], x.numel(2, x.rank()), x[1], ctx.input_box(0), out[0]->shape()[1], first_block, in[0]->f32(),
                out[0]->f32(), true);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("from_blocks", {dout[0]}, blocking_attrs(n.attrs), n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    return blocking_signatures(in[0].shape.rank(), static_cast<int>(a.get_int("parts")), a.get_int("balanced", 0) != 0,
                               true);
  };
  d.localize = localize_held;
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({2, 7, 3})}, {{"tokens", int64_t{7}}, {"parts", int64_t{3}}}, {}},
        {{f32({3, 8, 2, 2})}, {{"tokens", int64_t{8}}, {"parts", int64_t{2}}}, {}},
        {{f32({2, 11, 3})}, {{"tokens", int64_t{11}}, {"parts", int64_t{3}}, {"balanced", int64_t{1}}}, {}}};
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
    const int64_t first_block = ctx.input_box(0).offset_of(1);
    copy_tokens(a, x[0], x.numel(2, x.rank()), x[1], ctx.output_box(0), in[0]->shape()[1], first_block, in[0]->f32(),
                out[0]->f32(), false);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("to_blocks", {dout[0]}, blocking_attrs(n.attrs), n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    return blocking_signatures(in[0].shape.rank() - 1, static_cast<int>(a.get_int("parts")),
                               a.get_int("balanced", 0) != 0, false);
  };
  d.localize = localize_held;
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({2, 3, 3, 3})}, {{"tokens", int64_t{7}}, {"parts", int64_t{3}}}, {}},
        {{f32({2, 3, 4, 3})}, {{"tokens", int64_t{11}}, {"parts", int64_t{3}}, {"balanced", int64_t{1}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(to_blocks, make_to_blocks());
PX_REGISTER_OP(from_blocks, make_from_blocks());

}  // namespace
}  // namespace px::ops
