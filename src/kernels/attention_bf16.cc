// Self-attention under bf16 mixed precision (kernels/attention.h): per
// (batch, head), q, k and v at bf16 precision widened into fp32 scratch,
// (T, D) each, then the fp32 tile loop. The products read bf16 values and
// accumulate in fp32; scores, softmax statistics and gradients are fp32.
// Backward reads the output at bf16 precision too (FlashAttention-2's
// rowsum(dO ∘ O) on its bf16 O), so the lowering may store it in bf16.
// Legend: B batch, T time, H heads, D head dim, C = H*D.
#include <cmath>

#include "kernels/attention.h"
#include "kernels/attention_parts.h"
#include "kernels/attention_tiles.h"
#include "kernels/bf16.h"

namespace px::kernels {
namespace {

// `n` values of `x` from `offset` at bf16 precision, into `into`.
const float* at_bf16_precision(const Bf16Operand& x, int64_t offset, int64_t n, float* into) {
  if (x.rounded != nullptr) {
    to_float(n, x.rounded + offset, into);
  } else {
    for (int64_t i = 0; i < n; ++i) into[i] = to_float(to_bf16(x.f32[offset + i]));
  }
  return into;
}

// q, k, v of head (b, h) at bf16 precision, (3, T, D) in this thread's
// scratch: bf16 storage widened, fp32 rounded to nearest even first.
const float* widened_head(const AttentionDims& a, const Bf16Operand& qkv, int64_t b, int64_t h) {
  const int64_t C = a.H * a.D;
  float* into = detail::attention_scratch(3 * a.T * a.D, detail::Scratch::operands);
  for (int which = 0; which < 3; ++which)
    for (int64_t t = 0; t < a.T; ++t) {
      const int64_t from = (b * a.T + t) * 3 * C + which * C + h * a.D;
      at_bf16_precision(qkv, from, a.D, into + (which * a.T + t) * a.D);
    }
  return into;
}

detail::AttentionHead head_over_widened(const AttentionDims& a, const float* widened, int64_t* seen) {
  for (int64_t t = 0; t < a.T; ++t) seen[t] = a.causal ? t + 1 : a.T;
  return {.q = widened, .ldq = a.D, .k = widened + a.T * a.D, .v = widened + 2 * a.T * a.D, .ldkv = a.D,
          .rows = a.T, .D = a.D, .seen = seen, .scale = 1.0f / std::sqrt(static_cast<float>(a.D))};
}

}  // namespace

void attention_bf16(const AttentionDims& a, Bf16Operand qkv, float* out, float* lse) {
  if (attention_runs_on_amx(a)) return attention_bf16_amx(a, qkv, out, lse);
  const int64_t C = a.H * a.D;
  detail::for_each_head(a.B, a.H, [&](int64_t b, int64_t h, int64_t bh) {
    int64_t* seen = detail::attention_scratch<int64_t>(a.T);
    const detail::AttentionHead head = head_over_widened(a, widened_head(a, qkv, b, h), seen);
    for (int64_t r0 = 0; r0 < a.T; r0 += detail::kQueryTile)
      detail::attention_query_tile(head, r0, out + b * a.T * C + h * a.D, C, lse + bh * a.T, 1);
  });
}

void attention_backward_bf16(const AttentionDims& a, Bf16Operand qkv, Bf16Operand out, const float* lse,
                             const float* dout, float* dqkv) {
  if (attention_runs_on_amx(a)) return attention_backward_bf16_amx(a, qkv, out, lse, dout, dqkv);
  detail::for_each_head(a.B, a.H, [&](int64_t b, int64_t h, int64_t bh) {
    int64_t* seen = detail::attention_scratch<int64_t>(a.T);
    const detail::AttentionHead head = head_over_widened(a, widened_head(a, qkv, b, h), seen);
    const int64_t C = a.H * a.D, first = b * a.T * C + h * a.D;  // the head's (T, D) of out and dout, rows C apart
    float* delta = detail::attention_scratch(a.T, detail::Scratch::rows);
    float* row = detail::attention_scratch(a.D, detail::Scratch::stats);
    for (int64_t t = 0; t < a.T; ++t)
      delta[t] = detail::dot(dout + first + t * C, at_bf16_precision(out, first + t * C, a.D, row), a.D);
    detail::fused_head_backward(head, bh, a.H, delta, lse, dout, dqkv);
  });
}

}  // namespace px::kernels
