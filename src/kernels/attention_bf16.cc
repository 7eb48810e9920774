// Causal self-attention under bf16 mixed precision: kernels/attention.cc's
// row-blocked schedule with its products as bf16 GEMMs (gemm_mixed_bf16,
// called single-threaded inside the pool's (batch, head) loop). Scores,
// softmax, probabilities and gradients are computed in fp32; the products
// round what they read.
// Legend: B batch, T time, H heads, D head dim, C = H*D.
#include <cmath>
#include <vector>

#include "core/tensor.h"

#include "kernels/attention.h"
#include "kernels/attention_parts.h"
#include "kernels/cpu_features.h"

namespace px::kernels {
namespace {

// `t` advanced by `offset` elements, rows `ld` apart.
Bf16Operand at(const Bf16Operand& t, int64_t offset, int64_t ld) {
  if (t.rounded != nullptr) return {.rounded = t.rounded + offset, .ld = ld};
  return {.f32 = t.f32 + offset, .ld = ld};
}

Bf16Operand fp32(const float* x, int64_t ld) { return {.f32 = x, .ld = ld}; }

// `n` probabilities from `offset` at bf16 precision, widened into `into`:
// fp32 ones rounded first, so that probabilities stored in bf16 give the
// same gradient as the fp32 ones they were rounded from.
const float* probs_row(const Bf16Operand& p, int64_t offset, int64_t n, float* into) {
  if (p.f32 != nullptr) {
    for (int64_t j = 0; j < n; ++j) into[j] = to_float(to_bf16(p.f32[offset + j]));
    return into;
  }
  to_float(n, p.rounded + offset, into);
  return into;
}

// Heads narrower than this run their products in fp32 on the values
// widened from bf16: a head's products are then a few dozen GEMMs of at
// most T x T x D, and oneDNN's per-call cost (primitive lookup, memory
// objects, ~10 us) outweighs its bf16 rate. Measured 2026-11-26, train
// steps: gpt-mini (D = 32, T = 128, two threads) 0.87x fp32's step with
// bf16 products, 0.73x with widened fp32 ones; gpt-small-ish (D = 64,
// T = 256) the same either way (one thread 671 vs 639 ms, two 387 vs
// 396 ms); wider heads give the bf16 GEMMs more work per call.
constexpr int64_t kBf16HeadDim = 64;

// `n` values at bf16 precision as fp32: widened from bf16, or rounded.
Tensor at_bf16_precision(const Bf16Operand& x, int64_t n) {
  Tensor out = Tensor::empty({n}, DType::f32);
  if (x.rounded != nullptr) {
    to_float(n, x.rounded, out.f32());
  } else {
    std::vector<bf16> rounded(static_cast<size_t>(n));
    to_bf16(n, x.f32, rounded.data());
    to_float(n, rounded.data(), out.f32());
  }
  return out;
}

}  // namespace

void attention_bf16(int64_t B, int64_t T, int64_t H, int64_t D, Bf16Operand qkv, float* out, float* probs) {
  require_avx512_bf16("bf16 attention");
  if (D < kBf16HeadDim)
    return attention(B, T, H, D, at_bf16_precision(qkv, B * T * 3 * H * D).f32(), out, probs);
  const int64_t C = H * D, C3 = 3 * C, bs = detail::attention_block(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  detail::for_each_head(B, H, [&](int64_t b, int64_t h, int64_t i) {
    const int64_t q = b * T * C3 + h * D, k = q + C, v = q + 2 * C;  // (T, D) each, rows 3C apart
    float* p = probs + i * T * T;                                     // (T, T)
    float* o = out + b * T * C + h * D;                               // (T, D), rows C apart
    for (int64_t r0 = 0; r0 < T; r0 += bs) {
      const int64_t r1 = std::min(T, r0 + bs);
      gemm_mixed_bf16(false, true, r1 - r0, r1, D, scale, at(qkv, q + r0 * C3, C3), at(qkv, k, C3), 0.0f,
                      p + r0 * T, T);
      for (int64_t t = r0; t < r1; ++t) detail::causal_softmax_row(p + t * T, t, T);
      gemm_mixed_bf16(false, false, r1 - r0, D, r1, 1.0f, fp32(p + r0 * T, T), at(qkv, v, C3), 0.0f, o + r0 * C, C);
    }
  });
}

void attention_backward_bf16(int64_t B, int64_t T, int64_t H, int64_t D, Bf16Operand qkv, Bf16Operand probs,
                             const float* dout, float* dqkv) {
  require_avx512_bf16("bf16 attention");
  if (D < kBf16HeadDim)
    return attention_backward(B, T, H, D, at_bf16_precision(qkv, B * T * 3 * H * D).f32(),
                              at_bf16_precision(probs, B * H * T * T).f32(), dout, dqkv);
  const int64_t C = H * D, C3 = 3 * C, bs = detail::attention_block(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  detail::for_each_head(B, H, [&](int64_t b, int64_t h, int64_t i) {
    const int64_t q = b * T * C3 + h * D, k = q + C, v = q + 2 * C;
    const int64_t p = i * T * T;
    const float* dO = dout + b * T * C + h * D;  // (T, D), rows C apart
    float* dq = dqkv + b * T * C3 + h * D;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    float* ds = detail::attention_scratch(T * T);  // dP, then dS in place; row block r valid on keys [0, r1)
    float* row = detail::attention_scratch(T, 1);
    for (int64_t r0 = 0; r0 < T; r0 += bs) {
      const int64_t r1 = std::min(T, r0 + bs);
      gemm_mixed_bf16(false, true, r1 - r0, r1, D, 1.0f, fp32(dO + r0 * C, C), at(qkv, v, C3), 0.0f, ds + r0 * T,
                      T);
      for (int64_t t = r0; t < r1; ++t)
        detail::causal_softmax_grad_row(probs_row(probs, p + t * T, t + 1, row), ds + t * T, t, r1, scale);
      // dQ[r0:r1] = dS[r0:r1, 0:r1] K[0:r1]
      gemm_mixed_bf16(false, false, r1 - r0, D, r1, 1.0f, fp32(ds + r0 * T, T), at(qkv, k, C3), 0.0f,
                      dq + r0 * C3, C3);
    }
    // Key block [c0, c1) is seen by queries [c0, T).
    for (int64_t c0 = 0; c0 < T; c0 += bs) {
      const int64_t c1 = std::min(T, c0 + bs);
      gemm_mixed_bf16(true, false, c1 - c0, D, T - c0, 1.0f, fp32(ds + c0 * T + c0, T), at(qkv, q + c0 * C3, C3),
                      0.0f, dk + c0 * C3, C3);
      gemm_mixed_bf16(true, false, c1 - c0, D, T - c0, 1.0f, at(probs, p + c0 * T + c0, T), fp32(dO + c0 * C, C),
                      0.0f, dv + c0 * C3, C3);
    }
  });
}

}  // namespace px::kernels
