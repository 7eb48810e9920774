// Attention for serving over a paged KV cache (kernels/paged_attention.h):
// one iteration's tokens of several sequences, concatenated without
// padding (Orca's selective batching), each attending to its own cached
// positions and its own tokens of this iteration. Inference only: no
// backward. Legend: N tokens, H heads, D head dim, NB cache blocks, BS
// tokens per block, MB block-table entries per sequence.
//   paged_attention: qkv (N, 3, H, D), cache (NB, 2, H, BS, D), segments (N, 3 + MB) i32 -> out (N, H, D)
// Row r of `segments` describes r's sequence in this batch: {its first
// row, its rows, its positions already in the cache (start), its block
// table}; every row of a sequence carries the same. The graph only reads
// the cache: the decode runner (runtime/decode) writes this iteration's k
// and v into their slots after the step, so the graph stays a function.
// Heads are independent (Megatron's split: S(2) on qkv and the cache ->
// S(1)); rows are not (a sequence's rows must stay on one rank), so the
// batch dim splits only on an axis of one rank.
#include <algorithm>
#include <numeric>
#include <random>

#include "graph/ops/op_util.h"
#include "kernels/paged_attention.h"

namespace px::ops {
namespace {

constexpr int64_t kSegmentHeader = 3;  // first row, rows, start; the block table follows

// The sequences of this batch, read from `segments` and checked against it
// (px::Error naming the row and what is wrong: the table comes from the
// scheduler, so a bad one is a bug there, reported by name).
std::vector<kernels::AttentionSegment> segments_of(const Tensor& table, int64_t blocks, int64_t block_tokens) {
  const int64_t N = table.dim(0), width = table.dim(1), MB = width - kSegmentHeader;
  const int32_t* m = table.data<int32_t>();
  std::vector<kernels::AttentionSegment> out;
  for (int64_t r = 0; r < N; ++r) {
    const int32_t* row = m + r * width;
    const int64_t first = row[0], rows = row[1], start = row[2];
    if (first < 0 || first > r || rows < 1 || first + rows <= r || first + rows > N)
      fail("paged_attention: row {} says its sequence has rows [{}, {}) of the batch's {}", r, first, first + rows, N);
    if (start < 0 || start + rows > MB * block_tokens)
      fail("paged_attention: row {}'s sequence has positions [{}, {}); its block table holds {}", r, start,
           start + rows, MB * block_tokens);
    if (first != r) {
      if (!std::equal(row, row + width, m + first * width))
        fail("paged_attention: row {} and row {}, the first of its sequence, describe it differently", r, first);
      continue;
    }
    for (int64_t b = 0; b < (start + block_tokens - 1) / block_tokens; ++b)
      if (row[kSegmentHeader + b] < 0 || row[kSegmentHeader + b] >= blocks)
        fail("paged_attention: row {}'s block table entry {} is block {} of a cache of {}", r, b,
             row[kSegmentHeader + b], blocks);
    out.push_back({.first_row = first, .rows = rows, .start = start, .blocks = row + kSegmentHeader});
  }
  return out;
}

// A consistent segment table for the harnesses: the batch cut into
// sequences of random lengths, each with a random start and distinct blocks.
void draw_segments(std::vector<Tensor>& in, uint64_t seed) {
  Tensor& table = in[2];
  const int64_t N = table.dim(0), width = table.dim(1), MB = width - kSegmentHeader;
  const int64_t blocks = in[1].dim(0), block_tokens = in[1].dim(3);
  std::mt19937_64 rng(seed);
  int32_t* m = table.data<int32_t>();
  for (int64_t first = 0; first < N;) {
    const int64_t rows = std::min<int64_t>(N - first, 1 + static_cast<int64_t>(rng() % 3));
    const int64_t start = static_cast<int64_t>(rng() % static_cast<uint64_t>(MB * block_tokens - rows + 1));
    std::vector<int32_t> ids(static_cast<size_t>(blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int64_t r = first; r < first + rows; ++r) {
      int32_t* row = m + r * width;
      row[0] = static_cast<int32_t>(first);
      row[1] = static_cast<int32_t>(rows);
      row[2] = static_cast<int32_t>(start);
      for (int64_t b = 0; b < MB; ++b) row[kSegmentHeader + b] = ids[static_cast<size_t>(b % blocks)];
    }
    first += rows;
  }
}

OpDef make_paged_attention() {
  OpDef d;
  d.name = "paged_attention";
  d.attention_core = true;
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 3, 3);
    const Shape& q = in[0].shape;
    const Shape& c = in[1].shape;
    const Shape& s = in[2].shape;
    require(q.rank() == 4 && q[1] == 3, "qkv must be (N, 3, H, D), got {}", q);
    require(c.rank() == 5 && c[1] == 2 && c[2] == q[2] && c[4] == q[3],
            "the cache must be (blocks, 2, H, block_tokens, D) with qkv's H = {} and D = {}, got {}", q[2], q[3], c);
    require_dtype(in[2], DType::i32, "segments");
    require(s.rank() == 2 && s[0] == q[0] && s[1] > kSegmentHeader,
            "segments must be (N, 3 + block table) with qkv's N = {}, got {}", q[0], s);
    return std::vector<TensorSpec>{f32({q[0], q[2], q[3]})};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Shape& q = in[0]->shape();
    const Shape& c = in[1]->shape();
    const std::vector<kernels::AttentionSegment> segments = segments_of(*in[2], c[0], c[3]);
    kernels::paged_attention(q[2], q[3], c[3], in[0]->f32(), in[1]->f32(), segments, out[0]->f32());
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    const Shape& q = in[0].shape;
    OpCost c = streaming_cost({in[0], in[2]}, out);
    // Each row reads its sequence's cached keys and values: at most the
    // block table's reach, on average half of it.
    const double keys = 0.5 * double((in[2].shape[1] - kSegmentHeader) * in[1].shape[3]);
    c.flops = 4.0 * double(q[0] * q[2] * q[3]) * keys;
    c.bytes_read += 2.0 * double(q[0] * q[2] * q[3]) * keys * 4.0;
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs&) {
    PlacementSignature rows{"one_rank_rows", {Placement::S(0), Placement::B(), Placement::S(0)}, {Placement::S(0)}};
    rows.ranks = 1;
    return std::vector<PlacementSignature>{
        rows,
        {"head_parallel", {Placement::S(2), Placement::S(2), Placement::B()}, {Placement::S(1)}},
        {"replicated", {Placement::B(), Placement::B(), Placement::B()}, {Placement::B()}}};
  };
  d.examples = [] {
    OpExample small{{f32({5, 3, 2, 3}), f32({6, 2, 2, 4, 3}), {Shape{5, kSegmentHeader + 3}, DType::i32}}, {}, {0, 0, 1}};
    small.draw = draw_segments;
    OpExample wide{{f32({9, 3, 4, 5}), f32({12, 2, 4, 3, 5}), {Shape{9, kSegmentHeader + 5}, DType::i32}}, {}, {0, 0, 1}};
    wide.draw = draw_segments;
    return std::vector<OpExample>{small, wide};
  };
  return d;
}

PX_REGISTER_OP(paged_attention, make_paged_attention());

}  // namespace
}  // namespace px::ops
