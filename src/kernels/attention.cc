// Causal self-attention, fast path: per (batch, head) a handful of BLAS GEMMs
// that read q, k, v in place from the fused qkv tensor (row stride 3C) and
// write out / dqkv in place (row stride C / 3C). Causality is exploited by
// row blocks: block [r0, r1) of queries only sees keys [0, r1), so the
// products skip most of the upper triangle. (b, h) pairs are spread over the
// pool with BLAS kept single-threaded inside.
// Legend: B batch, T time, H heads, D head dim, C = H*D.
#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/attention_parts.h"

namespace px::kernels {

using detail::attention_block;
using detail::causal_softmax_grad_row;
using detail::causal_softmax_row;
using detail::for_each_head;

void attention(int64_t B, int64_t T, int64_t H, int64_t D, const float* qkv, float* out,
               float* probs) {
  const int64_t C = H * D, C3 = 3 * C, bs = attention_block(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for_each_head(B, H, [&](int64_t b, int64_t h, int64_t i) {
    const float* q = qkv + b * T * C3 + h * D;  // (T, D), row stride 3C
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* p = probs + i * T * T;  // (T, T)
    float* o = out + b * T * C + h * D;  // (T, D), row stride C
    for (int64_t r0 = 0; r0 < T; r0 += bs) {
      const int64_t r1 = std::min(T, r0 + bs);
      detail::sgemm(false, true, r1 - r0, r1, D, scale, q + r0 * C3, C3, k, C3, 0.0f, p + r0 * T,
                    T);
      for (int64_t t = r0; t < r1; ++t) causal_softmax_row(p + t * T, t, T);
      detail::sgemm(false, false, r1 - r0, D, r1, 1.0f, p + r0 * T, T, v, C3, 0.0f, o + r0 * C, C);
    }
  });
}

void attention_backward(int64_t B, int64_t T, int64_t H, int64_t D, const float* qkv,
                        const float* probs, const float* dout, float* dqkv) {
  const int64_t C = H * D, C3 = 3 * C, bs = attention_block(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for_each_head(B, H, [&](int64_t b, int64_t h, int64_t i) {
    const float* q = qkv + b * T * C3 + h * D;
    const float* k = q + C;
    const float* v = q + 2 * C;
    const float* p = probs + i * T * T;
    const float* dO = dout + b * T * C + h * D;  // (T, D), row stride C
    float* dq = dqkv + b * T * C3 + h * D;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    float* ds = detail::attention_scratch(T * T);  // dP, then dS in place; row block r valid on keys [0, r1)
    for (int64_t r0 = 0; r0 < T; r0 += bs) {
      const int64_t r1 = std::min(T, r0 + bs);
      detail::sgemm(false, true, r1 - r0, r1, D, 1.0f, dO + r0 * C, C, v, C3, 0.0f, ds + r0 * T,
                    T);
      for (int64_t t = r0; t < r1; ++t)
        causal_softmax_grad_row(p + t * T, ds + t * T, t, r1, scale);
      // dQ[r0:r1] = dS[r0:r1, 0:r1] K[0:r1]
      detail::sgemm(false, false, r1 - r0, D, r1, 1.0f, ds + r0 * T, T, k, C3, 0.0f, dq + r0 * C3,
                    C3);
    }
    // Key block [c0, c1) is seen by queries [c0, T).
    for (int64_t c0 = 0; c0 < T; c0 += bs) {
      const int64_t c1 = std::min(T, c0 + bs);
      const float* ds_block = ds + c0 * T + c0;
      detail::sgemm(true, false, c1 - c0, D, T - c0, 1.0f, ds_block, T, q + c0 * C3, C3, 0.0f,
                    dk + c0 * C3, C3);
      detail::sgemm(true, false, c1 - c0, D, T - c0, 1.0f, p + c0 * T + c0, T, dO + c0 * C, C,
                    0.0f, dv + c0 * C3, C3);
    }
  });
}

}  // namespace px::kernels
