// Self-attention without the T x T matrix (kernels/attention.h): every
// (batch, head) through the tile loop of kernels/attention_tiles.h, q, k
// and v read in place from the fused qkv (row stride 3C), out and dqkv
// written in place. Forward spreads (batch, head, query tile) over the
// pool, backward (batch, head) (a head's key and value gradients gather
// every query tile); BLAS runs single-threaded inside.
// Legend: B batch, T time, H heads, D head dim, C = H*D.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention_parts.h"
#include "kernels/attention_tiles.h"

namespace px::kernels {
namespace {

// Head (b, h) of qkv as the tile loop reads it; `seen` filled by the mask.
detail::AttentionHead fused_head_of(const AttentionDims& a, const float* qkv, int64_t b, int64_t h, int64_t* seen) {
  const int64_t C = a.H * a.D;
  for (int64_t t = 0; t < a.T; ++t) seen[t] = a.causal ? t + 1 : a.T;
  const float* q = qkv + b * a.T * 3 * C + h * a.D;
  return {.q = q, .ldq = 3 * C, .k = q + C, .v = q + 2 * C, .ldkv = 3 * C, .rows = a.T, .D = a.D, .seen = seen,
          .scale = 1.0f / std::sqrt(static_cast<float>(a.D))};
}

}  // namespace

void attention(const AttentionDims& a, const float* qkv, float* out, float* lse) {
  const int64_t C = a.H * a.D, tiles = (a.T + detail::kQueryTile - 1) / detail::kQueryTile;
  detail::SerialBlasScope serial;
  // Tiles innermost: each thread's contiguous chunk holds early (cheap)
  // and late (dear) causal tiles alike.
  px::parallel_for(0, a.B * a.H * tiles, 1, [&](int64_t lo, int64_t hi) {
    int64_t* seen = detail::attention_scratch<int64_t>(a.T);
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t bh = i / tiles, b = bh / a.H, h = bh % a.H;
      const detail::AttentionHead head = fused_head_of(a, qkv, b, h, seen);
      detail::attention_query_tile(head, (i % tiles) * detail::kQueryTile, out + b * a.T * C + h * a.D, C,
                                   lse + bh * a.T, 1);
    }
  });
}

void attention_backward(const AttentionDims& a, const float* qkv, const float* out, const float* lse,
                        const float* dout, float* dqkv) {
  detail::for_each_head(a.B, a.H, [&](int64_t b, int64_t h, int64_t bh) {
    int64_t* seen = detail::attention_scratch<int64_t>(a.T);
    const detail::AttentionHead head = fused_head_of(a, qkv, b, h, seen);
    const int64_t C = a.H * a.D, first = b * a.T * C + h * a.D;  // the head's (T, D) of out and dout, rows C apart
    float* delta = detail::attention_scratch(a.T, detail::Scratch::rows);
    for (int64_t t = 0; t < a.T; ++t) delta[t] = detail::dot(dout + first + t * C, out + first + t * C, a.D);
    detail::fused_head_backward(head, bh, a.H, delta, lse, dout, dqkv);
  });
}

}  // namespace px::kernels
