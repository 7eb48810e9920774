// Paged attention, fast path: per (segment, head) the sequence's keys and
// values are gathered from their cache blocks and this iteration's qkv into
// this thread's scratch, (L, D) each with L = start + rows; then, as
// kernels::attention does, query row blocks of 64 take two GEMMs and a
// causal row softmax (row i of the segment sees keys [0, start + i]).
// (segment, head) pairs are spread over the pool with BLAS single-threaded
// inside. Legend as in paged_attention.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention_parts.h"
#include "kernels/paged_attention.h"

namespace px::kernels {

void paged_attention(int64_t H, int64_t D, int64_t block_tokens, const float* qkv, const float* cache,
                     std::span<const AttentionSegment> segments, float* out) {
  const int64_t C = H * D, C3 = 3 * C, BS = block_tokens;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  detail::for_each_head(static_cast<int64_t>(segments.size()), H, [&](int64_t s, int64_t h, int64_t) {
    const AttentionSegment& seg = segments[static_cast<size_t>(s)];
    if (seg.rows == 0) return;
    const int64_t L = seg.start + seg.rows;
    float* k = detail::attention_scratch(2 * L * D);  // (L, D) keys, then (L, D) values
    float* v = k + L * D;
    for (int64_t p = 0; p < seg.start; ++p) {  // cached positions: slot p % BS of block blocks[p / BS]
      const float* block = cache + static_cast<int64_t>(seg.blocks[p / BS]) * 2 * H * BS * D;
      const int64_t at = (h * BS + p % BS) * D;
      std::memcpy(k + p * D, block + at, static_cast<size_t>(D) * sizeof(float));
      std::memcpy(v + p * D, block + H * BS * D + at, static_cast<size_t>(D) * sizeof(float));
    }
    const float* q = qkv + seg.first_row * C3 + h * D;  // (rows, D), row stride 3C
    for (int64_t i = 0; i < seg.rows; ++i) {            // this iteration's positions
      std::memcpy(k + (seg.start + i) * D, q + i * C3 + C, static_cast<size_t>(D) * sizeof(float));
      std::memcpy(v + (seg.start + i) * D, q + i * C3 + 2 * C, static_cast<size_t>(D) * sizeof(float));
    }
    const int64_t bs = detail::attention_block(seg.rows);
    float* p = detail::attention_scratch(bs * L, 1);  // a row block's scores, row stride L
    float* o = out + seg.first_row * C + h * D;       // (rows, D), row stride C
    for (int64_t r0 = 0; r0 < seg.rows; r0 += bs) {
      const int64_t r1 = std::min(seg.rows, r0 + bs), keys = seg.start + r1;
      detail::sgemm(false, true, r1 - r0, keys, D, scale, q + r0 * C3, C3, k, D, 0.0f, p, L);
      for (int64_t i = r0; i < r1; ++i) detail::causal_softmax_row(p + (i - r0) * L, seg.start + i, keys);
      detail::sgemm(false, false, r1 - r0, D, keys, 1.0f, p, L, v, D, 0.0f, o + r0 * C, C);
    }
  });
}

}  // namespace px::kernels
