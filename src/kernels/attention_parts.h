// What the fp32 and bf16 attention kernels share (kernels/attention.cc,
// attention_bf16.cc): the causal row blocks, the row softmax and its
// gradient, per-thread scratch, and the spread of (batch, head) pairs over
// the pool with BLAS single-threaded inside.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/blas.h"
#include "kernels/fast_math.h"

namespace px::kernels::detail {

// 64 query rows per block measured best for T = 128 and 256 (D = 32, 64).
inline int64_t attention_block(int64_t T) { return std::min<int64_t>(T, 64); }

// Softmax of row t of the scaled scores over keys [0, t]; zero above.
inline void causal_softmax_row(float* __restrict row, int64_t t, int64_t T) {
  const int64_t n = t + 1;
  float m = max(row, n);
  float inv = 1.0f / exp_shifted_sum(row, row, n, m);
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
  std::fill(row + n, row + T, 0.0f);
}

// dS = P * (dP - rowsum(P * dP)) * scale on row t, keys [0, t]; zero on (t, limit).
inline void causal_softmax_grad_row(const float* __restrict p, float* __restrict dp, int64_t t, int64_t limit,
                                    float scale) {
  const int64_t n = t + 1;
  float d = dot(p, dp, n);
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - d) * scale;
  std::fill(dp + n, dp + limit, 0.0f);
}

// `n` floats of this thread's scratch number `which` (0 or 1).
inline float* attention_scratch(int64_t n, int which = 0) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& buffer = buffers[which];
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

template <typename Body>
void for_each_head(int64_t B, int64_t H, Body body) {
  SerialBlasScope serial;
  px::parallel_for(0, B * H, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) body(i / H, i % H, i);
  });
}

}  // namespace px::kernels::detail
