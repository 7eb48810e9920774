// bf16 attention on AMX tiles (kernels/attention.h): the tile loop of
// kernels/attention_tiles.cc with its products on kernels/amx_gemm.h. Per head, q is kept in bf16 rows, K packed
// as Kᵀ's VNNI pairs and V as V's, both zero-padded to whole tiles; the
// scores come out fp32, the online softmax runs as the fp32 loop's, and
// the probabilities are rounded to bf16 for P·V into an fp32 output tile.
// Backward runs five products a tile pair as the fp32 loop does, but
// computes dVᵀ += dOᵀ P and dKᵀ += Qᵀ dS so that P and dS enter as VNNI
// row pairs, with no transposes (a transpose per tile cost more than the
// products).
// Legend: T tokens, D head dim (a multiple of 32), C = H·D.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/amx_gemm.h"
#include "kernels/attention.h"
#include "kernels/attention_parts.h"
#include "kernels/attention_tiles.h"

namespace px::kernels {
namespace {

constexpr float kAmxMinusInfinity = -std::numeric_limits<float>::infinity();

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

bf16 at_bf16(const Bf16Operand& x, int64_t i) { return x.rounded != nullptr ? x.rounded[i] : to_bf16(x.f32[i]); }

// One head's operands, packed for the AMX products.
struct PackedHead {
  std::vector<bf16> q;       // (Tq, D) rows, Tq = T rounded up to 16, zero rows past T
  std::vector<uint32_t> kt;  // Kᵀ as VNNI pairs: (D/2, Tk), Tk = T rounded up to 32, zero past T
  std::vector<uint32_t> v;   // V as VNNI pairs: (Tk/2, D)
  int64_t Tk = 0;
};

void pack_head(const AttentionDims& a, const Bf16Operand& qkv, int64_t b, int64_t h, PackedHead& p) {
  const int64_t C = a.H * a.D, D = a.D, Tq = round_up(a.T, 16);
  p.Tk = round_up(a.T, 32);
  p.q.assign(static_cast<size_t>(Tq * D), bf16{});
  p.kt.assign(static_cast<size_t>(D / 2 * p.Tk), 0u);
  p.v.assign(static_cast<size_t>(p.Tk / 2 * D), 0u);
  auto element = [&](int which, int64_t t, int64_t d) { return at_bf16(qkv, (b * a.T + t) * 3 * C + which * C + h * D + d); };
  for (int64_t t = 0; t < a.T; ++t)
    for (int64_t d = 0; d < D; ++d) {
      p.q[static_cast<size_t>(t * D + d)] = element(0, t, d);
      const uint32_t k = element(1, t, d).bits, v = element(2, t, d).bits;
      p.kt[static_cast<size_t>(d / 2 * p.Tk + t)] |= d % 2 == 0 ? k : k << 16;
      p.v[static_cast<size_t>(t / 2 * D + d)] |= t % 2 == 0 ? v : v << 16;
    }
}

}  // namespace

bool attention_runs_on_amx(const AttentionDims& a) { return a.D % 32 == 0 && amx_bf16_ready(); }

void attention_bf16_amx(const AttentionDims& a, Bf16Operand qkv, float* out, float* lse) {
  const int64_t C = a.H * a.D, D = a.D, QT = detail::kQueryTile, KT = detail::kKeyTile;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  detail::for_each_head(a.B, a.H, [&](int64_t b, int64_t h, int64_t bh) {
    thread_local PackedHead p;
    pack_head(a, qkv, b, h, p);
    thread_local std::vector<float> s, o;
    thread_local std::vector<bf16> prob;
    s.resize(static_cast<size_t>(QT * KT));
    o.resize(static_cast<size_t>(QT * D));
    prob.resize(static_cast<size_t>(QT * KT));
    float m[detail::kQueryTile], l[detail::kQueryTile];
    for (int64_t r0 = 0; r0 < a.T; r0 += QT) {
      const int64_t r1 = std::min(a.T, r0 + QT), rows = r1 - r0, rows16 = round_up(rows, 16);
      const int64_t keys = a.causal ? r1 : a.T;
      std::fill(m, m + rows, kAmxMinusInfinity);
      std::fill(l, l + rows, 0.0f);
      std::fill(o.begin(), o.begin() + rows16 * D, 0.0f);
      for (int64_t c0 = 0; c0 < keys; c0 += KT) {
        const int64_t cols = std::min(keys - c0, KT), cols32 = round_up(cols, 32);
        // S (rows16, cols32) = q kᵀ, unscaled.
        amx_gemm_bf16(rows16, cols32, D, p.q.data() + r0 * D, D, p.kt.data() + c0, p.Tk, s.data(), cols32, false);
        for (int64_t r = 0; r < rows; ++r) {
          float* row = s.data() + r * cols32;
          const int64_t t = r0 + r, n = std::clamp<int64_t>((a.causal ? t + 1 : a.T) - c0, 0, cols);
          bf16* pr = prob.data() + r * cols32;
          if (n > 0) {
            for (int64_t j = 0; j < n; ++j) row[j] *= scale;
            const float m_new = std::max(m[r], detail::max(row, n));
            const float rescale = m[r] == kAmxMinusInfinity ? 0.0f : std::exp(m[r] - m_new);
            l[r] = l[r] * rescale + detail::exp_shifted_sum(row, row, n, m_new);
            m[r] = m_new;
            if (rescale != 1.0f)
              for (int64_t d = 0; d < D; ++d) o[static_cast<size_t>(r * D + d)] *= rescale;
            to_bf16(n, row, pr);
          }
          std::fill(pr + n, pr + cols32, bf16{});
        }
        for (int64_t r = rows; r < rows16; ++r) std::fill_n(prob.data() + r * cols32, cols32, bf16{});
        // O (rows16, D) += P V over this tile's keys.
        amx_gemm_bf16(rows16, D, cols32, prob.data(), cols32, p.v.data() + c0 / 2 * D, D, o.data(), D, true);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const bool sees = l[r] > 0.0f;
        float* dst = out + (b * a.T + r0 + r) * C + h * D;
        for (int64_t d = 0; d < D; ++d) dst[d] = sees ? o[static_cast<size_t>(r * D + d)] / l[r] : 0.0f;
        lse[bh * a.T + r0 + r] = sees ? m[r] + std::log(l[r]) : kAmxMinusInfinity;
      }
    }
  });
}

}  // namespace px::kernels

namespace px::kernels {
namespace {

// (rows, cols) fp32, rows ld apart, as VNNI pairs of rows in bf16:
// (rows32/2, cols) uint32, zero past `rows`.
void vnni_rows(const float* x, int64_t rows, int64_t rows32, int64_t cols, int64_t ld, uint32_t* y) {
  thread_local std::vector<bf16> pair;
  pair.resize(static_cast<size_t>(2 * cols));
  bf16* even = pair.data();
  bf16* odd = pair.data() + cols;
  for (int64_t r2 = 0; r2 < rows32 / 2; ++r2) {
    const int64_t r = 2 * r2;
    uint32_t* out = y + r2 * cols;
    if (r >= rows) {
      std::fill_n(out, cols, 0u);
      continue;
    }
    to_bf16(cols, x + r * ld, even);  // the vector conversion
    if (r + 1 < rows) to_bf16(cols, x + (r + 1) * ld, odd);
    else std::fill_n(odd, cols, bf16{});
    for (int64_t c = 0; c < cols; ++c) out[c] = uint32_t{even[c].bits} | (uint32_t{odd[c].bits} << 16);
  }
}

// One backward row: p = exp(s·scale - lse) in place of s, dS = p (dP - delta)·scale in place of dP.
void amx_probabilities_and_ds(float* __restrict p, float* __restrict ds, int64_t n, float scale, float lse,
                              float delta) {
  using detail::f32x16;
  int64_t j = 0;
  for (; j + detail::kLanes <= n; j += detail::kLanes) {
    const f32x16 e = detail::exp_approx(detail::load16(p + j) * scale - lse);
    detail::store16(p + j, e);
    detail::store16(ds + j, e * (detail::load16(ds + j) - delta) * scale);
  }
  for (; j < n; ++j) {
    p[j] = detail::exp_approx(p[j] * scale - lse);
    ds[j] = p[j] * (ds[j] - delta) * scale;
  }
}

// Rows [0, T) of a (T, D) matrix given element by element, as VNNI pairs of
// rows (T32/2, D) and, with `transposed`, as Xᵀ's pairs (D/2, T32).
template <typename Element>
void pack_rows(int64_t T, int64_t D, int64_t T32, Element element, std::vector<uint32_t>* by_rows,
               std::vector<uint32_t>* transposed) {
  if (by_rows != nullptr) by_rows->assign(static_cast<size_t>(T32 / 2 * D), 0u);
  if (transposed != nullptr) transposed->assign(static_cast<size_t>(D / 2 * T32), 0u);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) {
      const uint32_t x = element(t, d).bits;
      if (by_rows != nullptr) (*by_rows)[static_cast<size_t>(t / 2 * D + d)] |= t % 2 == 0 ? x : x << 16;
      if (transposed != nullptr) (*transposed)[static_cast<size_t>(d / 2 * T32 + t)] |= d % 2 == 0 ? x : x << 16;
    }
}

}  // namespace

void attention_backward_bf16_amx(const AttentionDims& a, Bf16Operand qkv, Bf16Operand out, const float* lse,
                                 const float* dout, float* dqkv) {
  const int64_t C = a.H * a.D, D = a.D, QT = detail::kQueryTile, KT = detail::kKeyTile, T32 = round_up(a.T, 32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  detail::for_each_head(a.B, a.H, [&](int64_t b, int64_t h, int64_t bh) {
    auto qkv_at = [&](int which) {
      return [&, which](int64_t t, int64_t d) { return at_bf16(qkv, (b * a.T + t) * 3 * C + which * C + h * D + d); };
    };
    auto dout_at = [&](int64_t t, int64_t d) { return to_bf16(dout[(b * a.T + t) * C + h * D + d]); };
    thread_local std::vector<uint32_t> kt, k_rows, vt, pv, dsv;
    thread_local std::vector<bf16> q16, do16, qT, doT, ds16;
    thread_local std::vector<float> s, dp, dq, dkT, dvT, delta;
    pack_rows(a.T, D, T32, qkv_at(1), &k_rows, &kt);
    pack_rows(a.T, D, T32, qkv_at(2), nullptr, &vt);
    q16.assign(static_cast<size_t>(T32 * D), bf16{});
    do16.assign(static_cast<size_t>(T32 * D), bf16{});
    qT.assign(static_cast<size_t>(D * T32), bf16{});
    doT.assign(static_cast<size_t>(D * T32), bf16{});
    delta.assign(static_cast<size_t>(a.T), 0.0f);
    for (int64_t t = 0; t < a.T; ++t) {
      float dot = 0;
      for (int64_t d = 0; d < D; ++d) {
        const bf16 q = qkv_at(0)(t, d), g = dout_at(t, d);
        q16[static_cast<size_t>(t * D + d)] = qT[static_cast<size_t>(d * T32 + t)] = q;
        do16[static_cast<size_t>(t * D + d)] = doT[static_cast<size_t>(d * T32 + t)] = g;
        // softmax's row term from out at bf16 precision (as the fp32-tile bf16 path)
        dot += dout[(b * a.T + t) * C + h * D + d] * to_float(at_bf16(out, (b * a.T + t) * C + h * D + d));
      }
      delta[static_cast<size_t>(t)] = dot;
    }
    dq.assign(static_cast<size_t>(T32 * D), 0.0f);
    dkT.assign(static_cast<size_t>(D * T32), 0.0f);
    dvT.assign(static_cast<size_t>(D * T32), 0.0f);
    s.resize(static_cast<size_t>(QT * KT));
    dp.resize(static_cast<size_t>(QT * KT));
    pv.resize(static_cast<size_t>(QT / 2 * KT));
    dsv.resize(static_cast<size_t>(QT / 2 * KT));
    ds16.resize(static_cast<size_t>(QT * KT));
    for (int64_t r0 = 0; r0 < a.T; r0 += QT) {
      const int64_t r1 = std::min(a.T, r0 + QT), rows = r1 - r0, rows16 = round_up(rows, 16), rows32 = round_up(rows, 32);
      const int64_t keys = a.causal ? r1 : a.T;
      for (int64_t c0 = 0; c0 < keys; c0 += KT) {
        const int64_t cols = std::min(keys - c0, KT), cols32 = round_up(cols, 32);
        amx_gemm_bf16(rows16, cols32, D, q16.data() + r0 * D, D, kt.data() + c0, T32, s.data(), cols32, false);
        amx_gemm_bf16(rows16, cols32, D, do16.data() + r0 * D, D, vt.data() + c0, T32, dp.data(), cols32, false);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t t = r0 + r, n = std::clamp<int64_t>((a.causal ? t + 1 : a.T) - c0, 0, cols);
          float* pr = s.data() + r * cols32;
          float* dr = dp.data() + r * cols32;
          amx_probabilities_and_ds(pr, dr, n, scale, lse[bh * a.T + t], delta[static_cast<size_t>(t)]);
          std::fill(pr + n, pr + cols32, 0.0f);
          std::fill(dr + n, dr + cols32, 0.0f);
          to_bf16(cols32, dr, ds16.data() + r * cols32);
        }
        for (int64_t r = rows; r < rows16; ++r) std::fill_n(ds16.data() + r * cols32, cols32, bf16{});
        vnni_rows(s.data(), rows, rows32, cols32, cols32, pv.data());
        vnni_rows(dp.data(), rows, rows32, cols32, cols32, dsv.data());
        // dVᵀ_j += dOᵀ_i P;  dQ_i += dS K_j;  dKᵀ_j += Qᵀ_i dS
        amx_gemm_bf16(D, cols32, rows32, doT.data() + r0, T32, pv.data(), cols32, dvT.data() + c0, T32, true);
        amx_gemm_bf16(rows16, D, cols32, ds16.data(), cols32, k_rows.data() + c0 / 2 * D, D, dq.data() + r0 * D, D, true);
        amx_gemm_bf16(D, cols32, rows32, qT.data() + r0, T32, dsv.data(), cols32, dkT.data() + c0, T32, true);
      }
    }
    for (int64_t t = 0; t < a.T; ++t) {
      float* row = dqkv + (b * a.T + t) * 3 * C + h * D;
      std::copy_n(dq.data() + t * D, D, row);
      for (int64_t d = 0; d < D; ++d) {
        row[C + d] = dkT[static_cast<size_t>(d * T32 + t)];
        row[2 * C + d] = dvT[static_cast<size_t>(d * T32 + t)];
      }
    }
  });
}

}  // namespace px::kernels
