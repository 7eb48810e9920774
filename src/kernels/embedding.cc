// Embedding lookup and its gradient. The gradient is accumulated row by row
// in index order; threads split the C columns, never the rows, so the result
// is deterministic and independent of the thread count.
#include "kernels/embedding.h"

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"
#include "kernels/grain.h"

namespace px::kernels {

void embedding(int64_t N, int64_t C, const int32_t* ids, const float* table, int64_t first, int64_t rows,
               float* out) {
  int64_t grain = detail::rows_grain(C, detail::kCheapGrain);
  px::parallel_for(0, N, grain, [=](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const int64_t row = static_cast<int64_t>(ids[n]) - first;
      if (row >= 0 && row < rows)
        std::memcpy(out + n * C, table + row * C, static_cast<size_t>(C) * sizeof(float));
      else
        std::memset(out + n * C, 0, static_cast<size_t>(C) * sizeof(float));
    }
  });
}

void embedding_backward(int64_t N, int64_t C, const int32_t* ids, const float* dout, int64_t first, int64_t rows,
                        float* dtable) {
  int64_t grain = detail::rows_grain(N, detail::kCheapGrain);
  px::parallel_for(0, C, grain, [=](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = static_cast<int64_t>(ids[n]) - first;
      if (row < 0 || row >= rows) continue;
      const float* __restrict src = dout + n * C;
      float* __restrict dst = dtable + row * C;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
}

namespace ref {

void embedding(int64_t N, int64_t C, const int32_t* ids, const float* table, int64_t first, int64_t rows,
               float* out) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = ids[n] - first;
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = row >= 0 && row < rows ? table[row * C + c] : 0.0f;
  }
}

void embedding_backward(int64_t N, int64_t C, const int32_t* ids, const float* dout, int64_t first, int64_t rows,
                        float* dtable) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = ids[n] - first;
    if (row < 0 || row >= rows) continue;
    for (int64_t c = 0; c < C; ++c) dtable[row * C + c] += dout[n * C + c];
  }
}

}  // namespace ref
}  // namespace px::kernels
