// Blocked causal attention (kernels/block_attention.h): per (batch, block,
// head) the tile loop of kernels/attention_tiles.h over the block pair's
// tokens, the causal mask by global positions (a query row sees the prefix
// of the key block's tokens at or before it). Nothing (L x L) is kept:
// backward makes the probabilities again from the scores and the lse.
#include "kernels/block_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/block.h"
#include "kernels/attention_parts.h"
#include "kernels/attention_tiles.h"

namespace px::kernels {
namespace {

constexpr float kNoKey = -std::numeric_limits<float>::infinity();

// A block's tokens: one run, or a zigzag block's two (ascending either way).
struct Runs {
  Block run[2];
  int n = 1;
  int64_t count() const { return run[0].count + (n == 2 ? run[1].count : 0); }
  // The local rows [begin, end) of run r.
  int64_t begin(int r) const { return r == 0 ? 0 : run[0].count; }
  int64_t end(int r) const { return begin(r) + run[r].count; }
  int64_t position(int64_t i) const { return i < run[0].count ? run[0].begin + i : run[1].begin + (i - run[0].count); }
};

Runs runs_of(const BlockGrid& g, int64_t p) {
  if (!g.balanced) return {{block(g.tokens, static_cast<int>(g.parts), static_cast<int>(p)), {}}, 1};
  const ZigzagBlock z = zigzag_block(g.tokens, static_cast<int>(g.parts), static_cast<int>(p));
  return {{z.early, z.late}, 2};
}

// One (batch, block, head) of the grid: where its operands sit and which
// tokens its query and key blocks hold.
struct Pair {
  int64_t row0;  // the block's first row in (B·P·L)
  Runs queries, keys;
  // Keys query row i sees, those at or before its position: a prefix, the
  // keys ascending.
  int64_t seen(int64_t i) const {
    const int64_t at = queries.position(i);
    int64_t n = 0;
    for (int r = 0; r < keys.n; ++r) n += std::clamp<int64_t>(at - keys.run[r].begin + 1, 0, keys.run[r].count);
    return n;
  }
};

Pair pair_of(const BlockGrid& g, int64_t bp) {
  const int64_t p = bp % g.P, global = g.first + p;
  const int64_t key_block = ((global - g.shift) % g.parts + g.parts) % g.parts;
  return {.row0 = bp * g.L, .queries = runs_of(g, global), .keys = runs_of(g, key_block)};
}

}  // namespace

double block_entries(const BlockGrid& g) {
  double total = 0;
  for (int64_t bp = 0; bp < g.P; ++bp) {
    const Pair pair = pair_of(g, bp);
    for (int r = 0; r < pair.queries.n; ++r) {
      const int64_t lo = pair.queries.begin(r), hi = pair.queries.end(r);
      if (hi > lo) total += static_cast<double>((hi - lo) * pair.seen(hi - 1));
    }
  }
  return total;
}

double mean_block_entries(const BlockGrid& g) {
  BlockGrid all = g;
  all.P = g.parts;
  all.first = 0;
  return block_entries(all) / static_cast<double>(g.parts);
}

namespace {

// Block pair `bp`, head h as the tile loop reads it: the block's real
// query rows (padding excluded) and, in `seen`, the keys each sees.
detail::AttentionHead block_head_of(const BlockGrid& g, const Pair& pair, const float* qkv, const float* kv, int64_t h,
                              int64_t* seen) {
  const int64_t C = g.H * g.D, rows = pair.queries.count();
  for (int64_t i = 0; i < rows; ++i) seen[i] = pair.seen(i);
  const float* k = kv + pair.row0 * 2 * C + h * g.D;  // (L, D), row stride 2C
  return {.q = qkv + pair.row0 * 3 * C + h * g.D, .ldq = 3 * C, .k = k, .v = k + C, .ldkv = 2 * C, .rows = rows,
          .D = g.D, .seen = seen, .scale = 1.0f / std::sqrt(static_cast<float>(g.D))};
}

}  // namespace

void block_attention(const BlockGrid& g, const float* qkv, const float* kv, float* out, float* lse) {
  const int64_t C = g.H * g.D;
  detail::for_each_head(g.B * g.P, g.H, [&](int64_t bp, int64_t h, int64_t) {
    const Pair pair = pair_of(g, bp);
    int64_t* seen = detail::attention_scratch<int64_t>(g.L);
    const detail::AttentionHead head = block_head_of(g, pair, qkv, kv, h, seen);
    float* o = out + pair.row0 * C + h * g.D;  // (L, D), row stride C
    float* row_lse = lse + pair.row0 * g.H + h;  // stride H
    for (int64_t r0 = 0; r0 < head.rows; r0 += detail::kQueryTile)
      detail::attention_query_tile(head, r0, o, C, row_lse, g.H);
    for (int64_t i = head.rows; i < g.L; ++i) {  // padding
      std::fill_n(o + i * C, g.D, 0.0f);
      row_lse[i * g.H] = kNoKey;
    }
  });
}

void block_attention_backward(const BlockGrid& g, const float* qkv, const float* kv, const float* out,
                              const float* lse, const float* dout, const float* dlse, float* dqkv, float* dkv) {
  const int64_t C = g.H * g.D;
  std::memset(dqkv, 0, static_cast<size_t>(g.B * g.P * g.L * 3 * C) * sizeof(float));
  std::memset(dkv, 0, static_cast<size_t>(g.B * g.P * g.L * 2 * C) * sizeof(float));
  detail::for_each_head(g.B * g.P, g.H, [&](int64_t bp, int64_t h, int64_t) {
    const Pair pair = pair_of(g, bp);
    int64_t* seen = detail::attention_scratch<int64_t>(g.L);
    const detail::AttentionHead head = block_head_of(g, pair, qkv, kv, h, seen);
    const float* o = out + pair.row0 * C + h * g.D;
    const float* dO = dout + pair.row0 * C + h * g.D;
    float* delta = detail::attention_scratch(g.L, detail::Scratch::rows);
    // Softmax's row term Σ_j P ∘ dP = <dout, out>; d lse_i / d s_ij = p_ij,
    // so the incoming dlse takes its part off every dP of the row.
    for (int64_t i = 0; i < head.rows; ++i)
      delta[i] = detail::dot(dO + i * C, o + i * C, g.D) - dlse[(pair.row0 + i) * g.H + h];
    float* dk = dkv + pair.row0 * 2 * C + h * g.D;
    detail::attention_head_backward(head, {.lse = lse + pair.row0 * g.H + h, .lse_stride = g.H, .delta = delta,
                                           .dout = dO, .lddo = C, .dq = dqkv + pair.row0 * 3 * C + h * g.D,
                                           .lddq = 3 * C, .dk = dk, .dv = dk + C, .lddkv = 2 * C});
  });
}

namespace {

// The parts' weights of row r, head h: exp(lse_j - lse), summing to 1 (0 where every part skips the row).
void merge_weights(int64_t r, int64_t H, int64_t h, std::span<const float* const> lse, float* w) {
  float m = kNoKey;
  for (size_t j = 0; j < lse.size(); ++j) m = std::max(m, lse[j][r * H + h]);
  if (m == kNoKey) {
    std::fill(w, w + lse.size(), 0.0f);
    return;
  }
  float total = 0;
  for (size_t j = 0; j < lse.size(); ++j) total += w[j] = std::exp(lse[j][r * H + h] - m);
  for (size_t j = 0; j < lse.size(); ++j) w[j] /= total;
}

}  // namespace

void merge_attention(int64_t rows, int64_t H, int64_t D, std::span<const float* const> o,
                     std::span<const float* const> lse, float* out) {
  px::parallel_for(0, rows * H, 64, [&](int64_t lo, int64_t hi) {
    std::vector<float> w(o.size());
    for (int64_t i = lo; i < hi; ++i) {
      merge_weights(i / H, H, i % H, lse, w.data());
      float* y = out + i * D;
      std::fill(y, y + D, 0.0f);
      for (size_t j = 0; j < o.size(); ++j)
        if (w[j] != 0.0f)
          for (int64_t d = 0; d < D; ++d) y[d] += w[j] * o[j][i * D + d];
    }
  });
}

void merge_attention_backward(int64_t rows, int64_t H, int64_t D, std::span<const float* const> o,
                              std::span<const float* const> lse, const float* dout, std::span<float* const> dout_parts,
                              std::span<float* const> dlse_parts) {
  px::parallel_for(0, rows * H, 64, [&](int64_t lo, int64_t hi) {
    std::vector<float> w(o.size()), y(static_cast<size_t>(D));
    for (int64_t i = lo; i < hi; ++i) {
      merge_weights(i / H, H, i % H, lse, w.data());
      const float* g = dout + i * D;
      std::fill(y.begin(), y.end(), 0.0f);
      for (size_t j = 0; j < o.size(); ++j)
        for (int64_t d = 0; d < D; ++d) y[static_cast<size_t>(d)] += w[j] * o[j][i * D + d];
      const float through_out = detail::dot(g, y.data(), D);
      for (size_t j = 0; j < o.size(); ++j) {
        for (int64_t d = 0; d < D; ++d) dout_parts[j][i * D + d] = w[j] * g[d];
        dlse_parts[j][i] = w[j] * (detail::dot(g, o[j] + i * D, D) - through_out);
      }
    }
  });
}

}  // namespace px::kernels
