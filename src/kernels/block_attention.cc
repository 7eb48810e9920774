// Blocked causal attention (kernels/block_attention.h): per (batch, block,
// head) BLAS products over the block pair's tokens only, the causal mask by
// global positions, the row softmax of kernels/attention.cc's exp. The
// probabilities live in a per-thread scratch: backward makes them again
// from the scores and the forward's lse (memory-efficient attention).
#include "kernels/block_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/block.h"
#include "kernels/attention_parts.h"

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

// The scaled, masked scores of query rows [lo, hi) against the `keys` they
// see, exponentiated against `shift` per row (the row max forward, the
// row's lse backward, which gives the probabilities themselves): rows of
// `keys` floats in `s`. Returns nothing; rows that see no key are zero.
template <typename Shift>
void exp_scores(const Pair& pair, const float* q, const float* k, int64_t C, int64_t D, float scale, int64_t lo,
                int64_t hi, int64_t keys, float* s, Shift shift) {
  detail::sgemm(false, true, hi - lo, keys, D, scale, q + lo * 3 * C, 3 * C, k, 2 * C, 0.0f, s, keys);
  for (int64_t i = lo; i < hi; ++i) {
    float* row = s + (i - lo) * keys;
    const int64_t n = pair.seen(i);
    if (n > 0) shift(i, row, n);
    std::fill(row + n, row + keys, 0.0f);
  }
}

void block_attention(const BlockGrid& g, const float* qkv, const float* kv, float* out, float* lse) {
  const int64_t C = g.H * g.D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.D));
  detail::for_each_head(g.B * g.P, g.H, [&](int64_t bp, int64_t h, int64_t) {
    const Pair pair = pair_of(g, bp);
    const float* q = qkv + pair.row0 * 3 * C + h * g.D;  // (L, D), row stride 3C
    const float* k = kv + pair.row0 * 2 * C + h * g.D;   // (L, D), row stride 2C
    const float* v = k + C;
    float* o = out + pair.row0 * C + h * g.D;  // (L, D), row stride C
    float* row_lse = lse + pair.row0 * g.H + h;  // stride H
    for (int64_t i = 0; i < g.L; ++i) {
      std::fill(o + i * C, o + i * C + g.D, 0.0f);
      row_lse[i * g.H] = kNoKey;
    }
    for (int r = 0; r < pair.queries.n; ++r) {
      const int64_t lo = pair.queries.begin(r), hi = pair.queries.end(r);
      const int64_t keys = hi > lo ? pair.seen(hi - 1) : 0;  // what the run's last row sees
      if (keys == 0) continue;
      float* s = detail::attention_scratch((hi - lo) * keys);  // (rows, keys): the probabilities
      exp_scores(pair, q, k, C, g.D, scale, lo, hi, keys, s, [&](int64_t i, float* row, int64_t n) {
        const float m = detail::max(row, n);
        const float total = detail::exp_shifted_sum(row, row, n, m);
        const float inv = 1.0f / total;
        for (int64_t j = 0; j < n; ++j) row[j] *= inv;
        row_lse[i * g.H] = m + std::log(total);
      });
      detail::sgemm(false, false, hi - lo, g.D, keys, 1.0f, s, keys, v, 2 * C, 0.0f, o + lo * C, C);
    }
  });
}

void block_attention_backward(const BlockGrid& g, const float* qkv, const float* kv, const float* lse,
                              const float* dout, const float* dlse, float* dqkv, float* dkv) {
  const int64_t C = g.H * g.D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.D));
  std::memset(dqkv, 0, static_cast<size_t>(g.B * g.P * g.L * 3 * C) * sizeof(float));
  std::memset(dkv, 0, static_cast<size_t>(g.B * g.P * g.L * 2 * C) * sizeof(float));
  detail::for_each_head(g.B * g.P, g.H, [&](int64_t bp, int64_t h, int64_t) {
    const Pair pair = pair_of(g, bp);
    const float* q = qkv + pair.row0 * 3 * C + h * g.D;
    const float* k = kv + pair.row0 * 2 * C + h * g.D;
    const float* v = k + C;
    const float* row_lse = lse + pair.row0 * g.H + h;
    const float* dO = dout + pair.row0 * C + h * g.D;
    float* dq = dqkv + pair.row0 * 3 * C + h * g.D;
    float* dk = dkv + pair.row0 * 2 * C + h * g.D;
    float* dv = dk + C;
    for (int r = 0; r < pair.queries.n; ++r) {
      const int64_t lo = pair.queries.begin(r), hi = pair.queries.end(r), rows = hi - lo;
      const int64_t keys = hi > lo ? pair.seen(hi - 1) : 0;
      if (keys == 0) continue;
      // The probabilities again, from the scores and the forward's lse
      // (exp(s - lse) is the softmax): nothing (L x L) is kept between.
      float* p = detail::attention_scratch(rows * keys, 0);
      exp_scores(pair, q, k, C, g.D, scale, lo, hi, keys, p, [&](int64_t i, float* row, int64_t n) {
        const float shift = row_lse[i * g.H];
        for (int64_t j = 0; j < n; ++j) row[j] = std::exp(row[j] - shift);
      });
      float* ds = detail::attention_scratch(rows * keys, 1);  // dP, then dS in place: (rows, keys)
      detail::sgemm(false, true, rows, keys, g.D, 1.0f, dO + lo * C, C, v, 2 * C, 0.0f, ds, keys);
      for (int64_t i = lo; i < hi; ++i) {
        const float* pi = p + (i - lo) * keys;
        float* di = ds + (i - lo) * keys;
        const int64_t n = pair.seen(i);
        // d lse_i / d s_ij = p_ij, so the incoming dlse adds to every dP of the row.
        const float d = detail::dot(pi, di, n) - dlse[(pair.row0 + i) * g.H + h];
        for (int64_t j = 0; j < n; ++j) di[j] = pi[j] * (di[j] - d) * scale;
        std::fill(di + n, di + keys, 0.0f);
      }
      // Each query run adds its part of the keys' and values' gradients.
      detail::sgemm(false, false, rows, g.D, keys, 1.0f, ds, keys, k, 2 * C, 0.0f, dq + lo * 3 * C, 3 * C);
      detail::sgemm(true, false, keys, g.D, rows, 1.0f, ds, keys, q + lo * 3 * C, 3 * C, 1.0f, dk, 2 * C);
      detail::sgemm(true, false, keys, g.D, rows, 1.0f, p, keys, dO + lo * C, C, 1.0f, dv, 2 * C);
    }
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
