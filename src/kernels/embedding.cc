// Embedding lookup and its gradient. The gradient is accumulated row by row
// in index order; threads split the C columns, never the rows, so the result
// is deterministic and independent of the thread count.
#include "kernels/embedding.h"

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"
#include "kernels/grain.h"

namespace px::kernels {

void embedding(int64_t N, int64_t C, const int32_t* ids, const float* table, float* out) {
  int64_t grain = detail::rows_grain(C, detail::kCheapGrain);
  px::parallel_for(0, N, grain, [=](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n)
      std::memcpy(out + n * C, table + static_cast<int64_t>(ids[n]) * C,
                  static_cast<size_t>(C) * sizeof(float));
  });
}

void embedding_backward(int64_t N, int64_t C, const int32_t* ids, const float* dout,
                        float* dtable) {
  int64_t grain = detail::rows_grain(N, detail::kCheapGrain);
  px::parallel_for(0, C, grain, [=](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < N; ++n) {
      const float* __restrict src = dout + n * C;
      float* __restrict dst = dtable + static_cast<int64_t>(ids[n]) * C;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
}

namespace ref {

void embedding(int64_t N, int64_t C, const int32_t* ids, const float* table, float* out) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = table[ids[n] * C + c];
}

void embedding_backward(int64_t N, int64_t C, const int32_t* ids, const float* dout,
                        float* dtable) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) dtable[ids[n] * C + c] += dout[n * C + c];
}

}  // namespace ref
}  // namespace px::kernels
