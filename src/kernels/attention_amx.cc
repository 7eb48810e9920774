// bf16 attention on AMX tiles (kernels/attention.h): the tile loop of
// kernels/attention_tiles.cc with its products on kernels/amx_gemm.h.
// Per head, the operands are gathered once as bf16 rows, zero-padded to
// whole tiles, and packed as each product reads them (Kᵀ's and V's VNNI
// pairs, Qᵀ and dOᵀ as rows). Scores come out fp32; the online softmax runs
// as the fp32 loop's, but each row pass is one vector sweep that leaves
// the probabilities (and in backward dS) already rounded to bf16 in the
// layout the next product reads: rows for an A operand, VNNI row pairs
// for a B operand. Backward runs five products a tile pair as the fp32
// loop does, but computes dVᵀ += dOᵀ P and dKᵀ += Qᵀ dS so that P and dS
// enter as row pairs, with no transposes.
// Measured 2026-11-29 (px_bench_attention --T 1024 --precision bf16, one
// thread, B 8, H 6, D 64): forward + backward 56 + 144 ms with separate
// scale, exp, conversion and interleave passes and packing element by
// element; 46 + 125 with the fused sweeps; 35 + 74 once the transposed
// operands' rows were a cache line longer than T (a 4 KiB stride put a
// tile's rows in one L1 set); 29 + 67 with VSCALEFPS's exp and register
// transposes. The AMX products are then about 40% of the time.
// Legend: T tokens, T32 = T rounded up to 32, D head dim (a multiple of 32),
// C = H·D.
// GCC 12 warns that the intrinsics' undefined start values are
// uninitialized where they are inlined into target("avx512...") functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/amx_gemm.h"
#include "kernels/attention.h"
#include "kernels/attention_parts.h"
#include "kernels/attention_tiles.h"

#define PX_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace px::kernels {
namespace {

constexpr float kAmxMinusInfinity = -std::numeric_limits<float>::infinity();

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// The row stride of a head's transposed operands and gradients, (D, T32)
// or (D/2, T32): T32 plus a cache line, since a power-of-two stride (T =
// 1024: 4 KiB) puts a tile's 16 rows in one L1 set.
int64_t transposed_stride(int64_t T32) { return T32 + 16; }

// ---- a head's operands -------------------------------------------------


// D floats (a multiple of 16) rounded to bf16 by the instruction to_bf16
// follows (kernels/bf16.h).
PX_AVX512_BF16 void rounded_row(const float* x, int64_t D, bf16* y) {
  for (int64_t d = 0; d < D; d += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + d),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(x + d))));
}

// Rows [0, T) of one head's (T, D) slice of x (row t at first + t·stride)
// as bf16 rows (T32, D), zero past T: bf16 storage copied, fp32 rounded.
void head_rows(const Bf16Operand& x, int64_t first, int64_t stride, int64_t T, int64_t T32, int64_t D,
               std::vector<bf16>& into) {
  into.resize(static_cast<size_t>(T32 * D));
  for (int64_t t = 0; t < T; ++t) {
    if (x.rounded != nullptr) std::copy_n(x.rounded + first + t * stride, D, into.data() + t * D);
    else rounded_row(x.f32 + first + t * stride, D, into.data() + t * D);
  }
  std::fill(into.begin() + T * D, into.end(), bf16{});
}

// y = xᵀ for 16 x 16 32-bit words, rows ldx and ldy apart, in registers.
PX_AVX512_BF16 void transpose_block(const uint32_t* x, int64_t ldx, uint32_t* y, int64_t ldy) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(x + i * ldx);
  for (int i = 0; i < 16; i += 2) {  // pairs of words
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // fours
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8)  // 128-bit lanes, then 256-bit halves
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_si512(y + i * ldy, r[i]);
}

// y[c][r] = x[r][c] for 32-bit words (floats or bf16 pairs): x (R, N) rows
// ldx apart, y (N, R) rows ldy apart. Whole 16 x 16 blocks in registers,
// the edges word by word.
void transpose_words(const void* x, int64_t ldx, int64_t R, int64_t N, void* y, int64_t ldy) {
  const auto* from = static_cast<const char*>(x);
  auto* to = static_cast<char*>(y);
  for (int64_t r0 = 0; r0 < R; r0 += 16)
    for (int64_t c0 = 0; c0 < N; c0 += 16) {
      if (r0 + 16 <= R && c0 + 16 <= N) {
        transpose_block(reinterpret_cast<const uint32_t*>(from + 4 * (r0 * ldx + c0)), ldx,
                        reinterpret_cast<uint32_t*>(to + 4 * (c0 * ldy + r0)), ldy);
        continue;
      }
      for (int64_t c = c0; c < std::min(N, c0 + 16); ++c)
        for (int64_t r = r0; r < std::min(R, r0 + 16); ++r) std::memcpy(to + 4 * (c * ldy + r), from + 4 * (r * ldx + c), 4);
    }
}

// x (T32, D) as xᵀ's VNNI pairs (D/2, T32), rows ld apart: pair (x[t][2r],
// x[t][2r+1]) is already adjacent in row t, so this is a transpose of
// 32-bit words.
void pairs_of_columns(const std::vector<bf16>& x, int64_t T32, int64_t D, int64_t ld, std::vector<uint32_t>& pairs) {
  pairs.resize(static_cast<size_t>(D / 2 * ld));
  transpose_words(x.data(), D / 2, T32, D / 2, pairs.data(), ld);
}

// x (T32, D) as xᵀ (D, T32), rows ld apart: xᵀ's pairs of rows, each
// pair's row split into its low and high halves.
PX_AVX512_BF16 void transposed(const std::vector<bf16>& x, int64_t T32, int64_t D, int64_t ld, std::vector<bf16>& xt) {
  thread_local std::vector<uint32_t> pairs;
  pairs_of_columns(x, T32, D, ld, pairs);
  xt.resize(static_cast<size_t>(D * ld));
  for (int64_t r = 0; r < D / 2; ++r)
    for (int64_t t = 0; t < T32; t += 16) {
      const __m512i words = _mm512_loadu_si512(&pairs[static_cast<size_t>(r * ld + t)]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&xt[static_cast<size_t>(2 * r * ld + t)]),
                          _mm512_cvtepi32_epi16(words));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&xt[static_cast<size_t>((2 * r + 1) * ld + t)]),
                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16)));
    }
}

// x (T32, D) as x's VNNI pairs of rows (T32/2, D).
void pairs_of_rows(const std::vector<bf16>& x, int64_t T32, int64_t D, std::vector<uint32_t>& pairs) {
  pairs.resize(static_cast<size_t>(T32 / 2 * D));
  vnni_pack(T32, D, x.data(), D, pairs.data(), D);
}

// ---- the row sweeps ------------------------------------------------------

PX_AVX512_BF16 inline __mmask16 lanes_below(int64_t n) {
  return n >= 16 ? __mmask16{0xffff} : n <= 0 ? __mmask16{0} : static_cast<__mmask16>((1u << n) - 1u);
}

// e^x for x ≤ 0 (the sweeps' arguments: a score less its row's max or
// lse), fast_math.h's polynomial with the instruction set's rounding and
// 2^n (VRNDSCALEPS, VSCALEFPS) in place of the bit tricks that portable
// code needs. Arguments below -87 give e^-87 (1.6e-38, still a normal
// float: denormals would slow the products that read it).
PX_AVX512_BF16 inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// Two rows of 16 floats rounded to bf16, as one register: the even row's
// 16 values in the low half, the odd row's in the high half.
PX_AVX512_BF16 inline __m512i rounded_pair(__m512 even, __m512 odd) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even));
}

// rounded_pair's halves interleaved: 16 VNNI pairs (even[j], odd[j]).
PX_AVX512_BF16 inline __m512i interleaved(__m512i pair) {
  alignas(64) static constexpr uint16_t kOrder[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_permutexvar_epi16(_mm512_load_si512(kOrder), pair);
}

// Forward, one row of a tile: p[j] = exp(s[j]·scale − shift) for j < n,
// 0 for n ≤ j < width, stored as bf16; returns Σ p before rounding.
PX_AVX512_BF16 float exp_row_to_bf16(const float* s, int64_t n, int64_t width, float scale, float shift, bf16* p) {
  __m512 sum = _mm512_setzero_ps();
  const __m512 by = _mm512_set1_ps(scale), minus = _mm512_set1_ps(shift);
  for (int64_t j = 0; j < width; j += 16) {
    const __mmask16 valid = lanes_below(n - j);
    const __m512 e = _mm512_maskz_mov_ps(valid, exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(valid, s + j), by, minus)));
    sum = _mm512_add_ps(sum, e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
  }
  return _mm512_reduce_add_ps(sum);
}

// Backward, one row of a tile pair: what makes P and dS for it.
struct BackwardRow {
  const float* s;   // raw scores q·k
  const float* dp;  // dout · v
  int64_t n;        // keys seen in this tile (0 for a padding row)
  float lse, delta;
};

// Backward, rows 2i and 2i+1 of a tile pair, `width` columns: P = exp(s·scale
// − lse) and dS = P (dP − delta)·scale, zero past each row's n, rounded to
// bf16 and stored as the three operands that read them: P's and dS's VNNI
// pairs of rows (the dVᵀ and dKᵀ products' B) and dS's two rows (dQ's A).
// One row's 16 columns from j: P and dS as fp32 lanes. A function, not a
// lambda inside backward_row_pair: GCC does not give a lambda its enclosing
// function's target, so on a build host without AVX-512 the lambda's
// intrinsics would not inline.
PX_AVX512_BF16 inline void p_and_ds(const BackwardRow& row, int64_t j, __m512 by, __m512& p, __m512& ds) {
  const __mmask16 valid = lanes_below(row.n - j);
  p = _mm512_maskz_mov_ps(valid,
                          exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(valid, row.s + j), by, _mm512_set1_ps(row.lse))));
  const __m512 dp = _mm512_maskz_loadu_ps(valid, row.dp + j);
  ds = _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(dp, _mm512_set1_ps(row.delta))), by);
}

PX_AVX512_BF16 void backward_row_pair(const BackwardRow& even, const BackwardRow& odd, int64_t width, float scale,
                                      uint32_t* p_pairs, uint32_t* ds_pairs, bf16* ds_even, bf16* ds_odd) {
  const __m512 by = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < width; j += 16) {
    __m512 p0, ds0, p1, ds1;
    p_and_ds(even, j, by, p0, ds0);
    p_and_ds(odd, j, by, p1, ds1);
    const __m512i ds = rounded_pair(ds0, ds1);
    _mm512_storeu_si512(p_pairs + j, interleaved(rounded_pair(p0, p1)));
    _mm512_storeu_si512(ds_pairs + j, interleaved(ds));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ds_even + j), _mm512_castsi512_si256(ds));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ds_odd + j), _mm512_extracti64x4_epi64(ds, 1));
  }
}

// Backward's softmax row term: delta[t] = <dout_t, out_t> on out at bf16
// precision (FlashAttention-2's rowsum(dO ∘ O) on its bf16 O).
void deltas(const float* dout, int64_t stride, const std::vector<bf16>& out_rows, int64_t T, int64_t D,
            float* delta) {
  for (int64_t t = 0; t < T; ++t) {
    detail::f32x16 acc = {};
    for (int64_t d = 0; d < D; d += detail::kLanes)
      acc += detail::load16(dout + t * stride + d) * detail::load16_bf16(&out_rows[static_cast<size_t>(t * D + d)]);
    delta[t] = detail::hsum(acc);
  }
}

}  // namespace

bool attention_runs_on_amx(const AttentionDims& a) { return a.D % 32 == 0 && amx_bf16_ready(); }

void attention_bf16_amx(const AttentionDims& a, Bf16Operand qkv, float* out, float* lse) {
  const int64_t C = a.H * a.D, D = a.D, QT = detail::kQueryTile, KT = detail::kKeyTile, T32 = round_up(a.T, 32);
  const int64_t ldt = transposed_stride(T32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  detail::for_each_head(a.B, a.H, [&](int64_t b, int64_t h, int64_t bh) {
    thread_local std::vector<bf16> q, k, v, prob;
    thread_local std::vector<uint32_t> kt, v_pairs;
    thread_local std::vector<float> s, o;
    const int64_t first = b * a.T * 3 * C + h * D;
    head_rows(qkv, first, 3 * C, a.T, T32, D, q);
    head_rows(qkv, first + C, 3 * C, a.T, T32, D, k);
    head_rows(qkv, first + 2 * C, 3 * C, a.T, T32, D, v);
    pairs_of_columns(k, T32, D, ldt, kt);  // S's B = Kᵀ
    pairs_of_rows(v, T32, D, v_pairs);
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
        amx_gemm_bf16(rows16, cols32, D, q.data() + r0 * D, D, kt.data() + c0, ldt, s.data(), cols32, false);
        for (int64_t r = 0; r < rows16; ++r) {
          const float* row = s.data() + r * cols32;
          const int64_t t = r0 + r;
          const int64_t n = r < rows ? std::clamp<int64_t>((a.causal ? t + 1 : a.T) - c0, 0, cols) : 0;
          bf16* pr = prob.data() + r * cols32;
          if (n == 0) {
            std::fill(pr, pr + cols32, bf16{});
            continue;
          }
          // The scale is positive, so the scaled row's max is the scaled max.
          const float m_new = std::max(m[r], detail::max(row, n) * scale);
          const float rescale = m[r] == kAmxMinusInfinity ? 0.0f : std::exp(m[r] - m_new);
          l[r] = l[r] * rescale + exp_row_to_bf16(row, n, cols32, scale, m_new, pr);
          m[r] = m_new;
          if (rescale != 1.0f)
            for (int64_t d = 0; d < D; ++d) o[static_cast<size_t>(r * D + d)] *= rescale;
        }
        // O (rows16, D) += P V over this tile's keys.
        amx_gemm_bf16(rows16, D, cols32, prob.data(), cols32, v_pairs.data() + c0 / 2 * D, D, o.data(), D, true);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const bool sees = l[r] > 0.0f;
        const float by = sees ? 1.0f / l[r] : 0.0f;
        float* dst = out + (b * a.T + r0 + r) * C + h * D;
        for (int64_t d = 0; d < D; ++d) dst[d] = o[static_cast<size_t>(r * D + d)] * by;
        lse[bh * a.T + r0 + r] = sees ? m[r] + std::log(l[r]) : kAmxMinusInfinity;
      }
    }
  });
}

void attention_backward_bf16_amx(const AttentionDims& a, Bf16Operand qkv, Bf16Operand out, const float* lse,
                                 const float* dout, float* dqkv) {
  const int64_t C = a.H * a.D, D = a.D, QT = detail::kQueryTile, KT = detail::kKeyTile, T32 = round_up(a.T, 32);
  const int64_t ldt = transposed_stride(T32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  detail::for_each_head(a.B, a.H, [&](int64_t b, int64_t h, int64_t bh) {
    thread_local std::vector<bf16> q, k, v, dO, o16, qT, doT, ds_rows;
    thread_local std::vector<uint32_t> kt, k_pairs, vt, p_pairs, ds_pairs;
    thread_local std::vector<float> s, dp, dq, dkT, dvT, delta;
    const int64_t first = b * a.T * 3 * C + h * D, first_out = b * a.T * C + h * D;
    head_rows(qkv, first, 3 * C, a.T, T32, D, q);
    head_rows(qkv, first + C, 3 * C, a.T, T32, D, k);
    head_rows(qkv, first + 2 * C, 3 * C, a.T, T32, D, v);
    head_rows({.f32 = dout}, first_out, C, a.T, T32, D, dO);
    head_rows(out, first_out, C, a.T, T32, D, o16);
    delta.resize(static_cast<size_t>(a.T));
    deltas(dout + first_out, C, o16, a.T, D, delta.data());
    pairs_of_columns(k, T32, D, ldt, kt);  // S's B = Kᵀ
    pairs_of_columns(v, T32, D, ldt, vt);  // dP's B = Vᵀ
    pairs_of_rows(k, T32, D, k_pairs);     // dQ's B = K
    transposed(q, T32, D, ldt, qT);        // dKᵀ's A = Qᵀ
    transposed(dO, T32, D, ldt, doT);      // dVᵀ's A = dOᵀ
    dq.assign(static_cast<size_t>(T32 * D), 0.0f);
    dkT.assign(static_cast<size_t>(D * ldt), 0.0f);
    dvT.assign(static_cast<size_t>(D * ldt), 0.0f);
    s.resize(static_cast<size_t>(QT * KT));
    dp.resize(static_cast<size_t>(QT * KT));
    p_pairs.resize(static_cast<size_t>(QT / 2 * KT));
    ds_pairs.resize(static_cast<size_t>(QT / 2 * KT));
    ds_rows.resize(static_cast<size_t>(QT * KT));
    for (int64_t r0 = 0; r0 < a.T; r0 += QT) {
      const int64_t r1 = std::min(a.T, r0 + QT), rows = r1 - r0, rows16 = round_up(rows, 16), rows32 = round_up(rows, 32);
      const int64_t keys = a.causal ? r1 : a.T;
      for (int64_t c0 = 0; c0 < keys; c0 += KT) {
        const int64_t cols = std::min(keys - c0, KT), cols32 = round_up(cols, 32);
        // rows32 ≥ rows16 rows of S and dP: the pair sweep reads rows up to rows32 (masked past `rows`).
        amx_gemm_bf16(rows16, cols32, D, q.data() + r0 * D, D, kt.data() + c0, ldt, s.data(), cols32, false);
        amx_gemm_bf16(rows16, cols32, D, dO.data() + r0 * D, D, vt.data() + c0, ldt, dp.data(), cols32, false);
        auto row = [&](int64_t r) -> BackwardRow {
          const int64_t t = r0 + r;
          if (r >= rows) return {.s = s.data(), .dp = dp.data(), .n = 0, .lse = 0.0f, .delta = 0.0f};
          return {.s = s.data() + r * cols32, .dp = dp.data() + r * cols32,
                  .n = std::clamp<int64_t>((a.causal ? t + 1 : a.T) - c0, 0, cols), .lse = lse[bh * a.T + t],
                  .delta = delta[static_cast<size_t>(t)]};
        };
        for (int64_t r = 0; r < rows32; r += 2)
          backward_row_pair(row(r), row(r + 1), cols32, scale, p_pairs.data() + r / 2 * cols32,
                            ds_pairs.data() + r / 2 * cols32, ds_rows.data() + r * cols32,
                            ds_rows.data() + (r + 1) * cols32);
        // dVᵀ_j += dOᵀ_i P;  dQ_i += dS K_j;  dKᵀ_j += Qᵀ_i dS
        amx_gemm_bf16(D, cols32, rows32, doT.data() + r0, ldt, p_pairs.data(), cols32, dvT.data() + c0, ldt, true);
        amx_gemm_bf16(rows16, D, cols32, ds_rows.data(), cols32, k_pairs.data() + c0 / 2 * D, D, dq.data() + r0 * D,
                      D, true);
        amx_gemm_bf16(D, cols32, rows32, qT.data() + r0, ldt, ds_pairs.data(), cols32, dkT.data() + c0, ldt, true);
      }
    }
    float* dst = dqkv + b * a.T * 3 * C + h * D;  // the head's (T, D) of dq, rows 3C apart; dk, dv C and 2C on
    for (int64_t t = 0; t < a.T; ++t) std::copy_n(dq.data() + t * D, D, dst + t * 3 * C);
    transpose_words(dkT.data(), ldt, D, a.T, dst + C, 3 * C);
    transpose_words(dvT.data(), ldt, D, a.T, dst + 2 * C, 3 * C);
  });
}

}  // namespace px::kernels

#undef PX_AVX512_BF16

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
