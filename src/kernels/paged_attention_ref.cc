// Paged attention, reference: the textbook loops in double, one row and
// head at a time, each key read where it lives (cache block or qkv).
// Legend as in paged_attention.h.
#include <cmath>
#include <vector>

#include "kernels/paged_attention.h"

namespace px::kernels::ref {

void paged_attention(int64_t H, int64_t D, int64_t block_tokens, const float* qkv, const float* cache,
                     std::span<const AttentionSegment> segments, float* out) {
  const int64_t C = H * D, C3 = 3 * C, BS = block_tokens;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (const AttentionSegment& seg : segments) {
    // Key (which = 0) or value (1) of position p for head h.
    auto kv = [&](int64_t p, int which, int64_t h) -> const float* {
      if (p >= seg.start) return qkv + (seg.first_row + p - seg.start) * C3 + (1 + which) * C + h * D;
      return cache + ((static_cast<int64_t>(seg.blocks[p / BS]) * 2 + which) * H + h) * BS * D + (p % BS) * D;
    };
    std::vector<double> s(static_cast<size_t>(seg.start + seg.rows));
    for (int64_t i = 0; i < seg.rows; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const float* q = qkv + (seg.first_row + i) * C3 + h * D;
        const int64_t keys = seg.start + i + 1;
        double m = -INFINITY, total = 0;
        for (int64_t p = 0; p < keys; ++p) {
          const float* k = kv(p, 0, h);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[d];
          s[static_cast<size_t>(p)] = dot * scale;
          m = std::max(m, s[static_cast<size_t>(p)]);
        }
        for (int64_t p = 0; p < keys; ++p) total += s[static_cast<size_t>(p)] = std::exp(s[static_cast<size_t>(p)] - m);
        float* o = out + (seg.first_row + i) * C + h * D;
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t p = 0; p < keys; ++p) acc += s[static_cast<size_t>(p)] * kv(p, 1, h)[d];
          o[d] = static_cast<float>(acc / total);
        }
      }
  }
}

}  // namespace px::kernels::ref
