// The attention tile loop (kernels/attention_tiles.h). A query tile reads
// the key tiles up to what its last row sees; in each, two BLAS products
// on the operands in place (the scores, then probabilities times values)
// around the row pass of the online softmax. Backward runs five products
// per tile pair: the scores again, dP = dout vᵀ, and dV, dQ, dK.
#include "kernels/attention_tiles.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention_parts.h"

namespace px::kernels::detail {
namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

// The keys row r of a tile starting at key c0 and `cols` wide sees.
int64_t seen_in_tile(const AttentionHead& h, int64_t r, int64_t c0, int64_t cols) {
  return std::clamp<int64_t>(h.seen[r] - c0, 0, cols);
}

// One row of a backward tile, n entries: p = exp(s - lse) (the softmax
// itself) in place of the scores, and dS = p (dP - delta) scale in place
// of dP. One pass.
void probabilities_and_ds(float* __restrict p, float* __restrict ds, int64_t n, float lse, float delta,
                          float scale) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const f32x16 e = exp_approx(load16(p + j) - lse);
    store16(p + j, e);
    store16(ds + j, e * (load16(ds + j) - delta) * scale);
  }
  for (; j < n; ++j) {
    p[j] = exp_approx(p[j] - lse);
    ds[j] = p[j] * (ds[j] - delta) * scale;
  }
}

void scale_row(float* x, int64_t D, float by) {
  for (int64_t d = 0; d < D; ++d) x[d] *= by;
}

}  // namespace

void attention_query_tile(const AttentionHead& h, int64_t r0, float* out, int64_t ldo, float* lse,
                          int64_t lse_stride) {
  const int64_t r1 = std::min(h.rows, r0 + kQueryTile), rows = r1 - r0, keys = h.seen[r1 - 1];
  float* s = attention_scratch(kQueryTile * kKeyTile, Scratch::tiles);  // a tile of scores, then probabilities
  float* m = attention_scratch(2 * kQueryTile, Scratch::stats);     // per row: the running max,
  float* l = m + kQueryTile;                            // and the running sum of exp(s - max)
  std::fill(m, m + rows, kMinusInfinity);
  std::fill(l, l + rows, 0.0f);
  for (int64_t r = r0; r < r1; ++r) std::fill(out + r * ldo, out + r * ldo + h.D, 0.0f);
  for (int64_t c0 = 0; c0 < keys; c0 += kKeyTile) {
    const int64_t cols = std::min(keys - c0, kKeyTile);
    sgemm(false, true, rows, cols, h.D, h.scale, h.q + r0 * h.ldq, h.ldq, h.k + c0 * h.ldkv, h.ldkv, 0.0f, s, cols);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s + r * cols;
      const int64_t n = seen_in_tile(h, r0 + r, c0, cols);
      if (n > 0) {
        const float m_new = std::max(m[r], max(row, n));
        // The sum and output so far were taken against the old max.
        const float rescale = m[r] == kMinusInfinity ? 0.0f : std::exp(m[r] - m_new);
        l[r] = l[r] * rescale + exp_shifted_sum(row, row, n, m_new);
        m[r] = m_new;
        if (rescale != 1.0f) scale_row(out + (r0 + r) * ldo, h.D, rescale);
      }
      std::fill(row + n, row + cols, 0.0f);
    }
    sgemm(false, false, rows, h.D, cols, 1.0f, s, cols, h.v + c0 * h.ldkv, h.ldkv, 1.0f, out + r0 * ldo, ldo);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const bool sees = l[r] > 0.0f;
    if (sees) scale_row(out + (r0 + r) * ldo, h.D, 1.0f / l[r]);
    lse[(r0 + r) * lse_stride] = sees ? m[r] + std::log(l[r]) : kMinusInfinity;
  }
}

void attention_head_backward(const AttentionHead& h, const AttentionHeadGrad& g) {
  float* p = attention_scratch(2 * kQueryTile * kKeyTile, Scratch::tiles);  // a tile of probabilities,
  float* ds = p + kQueryTile * kKeyTile;                    // and of dP, then dS
  for (int64_t r0 = 0; r0 < h.rows; r0 += kQueryTile) {
    const int64_t r1 = std::min(h.rows, r0 + kQueryTile), rows = r1 - r0, keys = h.seen[r1 - 1];
    for (int64_t c0 = 0; c0 < keys; c0 += kKeyTile) {
      const int64_t cols = std::min(keys - c0, kKeyTile);
      const float* k = h.k + c0 * h.ldkv;
      const float* v = h.v + c0 * h.ldkv;
      sgemm(false, true, rows, cols, h.D, h.scale, h.q + r0 * h.ldq, h.ldq, k, h.ldkv, 0.0f, p, cols);
      sgemm(false, true, rows, cols, h.D, 1.0f, g.dout + r0 * g.lddo, g.lddo, v, h.ldkv, 0.0f, ds, cols);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = r0 + r, n = seen_in_tile(h, t, c0, cols);
        float* pr = p + r * cols;
        float* dr = ds + r * cols;
        if (n > 0) probabilities_and_ds(pr, dr, n, g.lse[t * g.lse_stride], g.delta[t], h.scale);
        std::fill(pr + n, pr + cols, 0.0f);
        std::fill(dr + n, dr + cols, 0.0f);
      }
      // dV_j += Pᵀ dout_i;  dQ_i += dS K_j;  dK_j += dSᵀ Q_i
      sgemm(true, false, cols, h.D, rows, 1.0f, p, cols, g.dout + r0 * g.lddo, g.lddo, 1.0f, g.dv + c0 * g.lddkv,
            g.lddkv);
      sgemm(false, false, rows, h.D, cols, 1.0f, ds, cols, k, h.ldkv, 1.0f, g.dq + r0 * g.lddq, g.lddq);
      sgemm(true, false, cols, h.D, rows, 1.0f, ds, cols, h.q + r0 * h.ldq, h.ldq, 1.0f, g.dk + c0 * g.lddkv,
            g.lddkv);
    }
  }
}

}  // namespace px::kernels::detail

namespace px::kernels::detail {

void fused_head_backward(const AttentionHead& head, int64_t bh, int64_t H, const float* delta, const float* lse,
                         const float* dout, float* dqkv) {
  const int64_t T = head.rows, D = head.D, C = H * D, C3 = 3 * C, b = bh / H, h = bh % H;
  const float* dO = dout + b * T * C + h * D;  // (T, D), row stride C
  float* dq = dqkv + b * T * C3 + h * D;       // (T, D) each, row stride 3C; dk, dv C and 2C on
  for (int64_t t = 0; t < T; ++t)
    for (int which = 0; which < 3; ++which) std::fill_n(dq + t * C3 + which * C, D, 0.0f);
  attention_head_backward(head, {.lse = lse + bh * T, .lse_stride = 1, .delta = delta, .dout = dO, .lddo = C,
                                 .dq = dq, .lddq = C3, .dk = dq + C, .dv = dq + 2 * C, .lddkv = C3});
}

}  // namespace px::kernels::detail
