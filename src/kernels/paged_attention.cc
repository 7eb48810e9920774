// Paged attention, fast path: per (segment, head) the sequence's keys and
// values are gathered from their cache blocks and this iteration's qkv into
// this thread's scratch, (L, D) each with L = start + rows; then the tile
// loop every attention kernel runs (kernels/attention_tiles.h), row i of
// the segment seeing keys [0, start + i].
// (segment, head) pairs are spread over the pool with BLAS single-threaded
// inside. Legend as in paged_attention.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention_parts.h"
#include "kernels/attention_tiles.h"
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
    float* k = detail::attention_scratch(2 * L * D, detail::Scratch::operands);  // (L, D) keys, then (L, D) values
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
    int64_t* seen = detail::attention_scratch<int64_t>(seg.rows);
    for (int64_t i = 0; i < seg.rows; ++i) seen[i] = seg.start + i + 1;
    const detail::AttentionHead head{.q = q, .ldq = C3, .k = k, .v = v, .ldkv = D, .rows = seg.rows, .D = D,
                                     .seen = seen, .scale = scale};
    float* lse = detail::attention_scratch(seg.rows, detail::Scratch::rows);  // not needed here
    float* o = out + seg.first_row * C + h * D;  // (rows, D), row stride C
    for (int64_t r0 = 0; r0 < seg.rows; r0 += detail::kQueryTile) detail::attention_query_tile(head, r0, o, C, lse, 1);
  });
}

}  // namespace px::kernels
