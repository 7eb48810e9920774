// Row softmax. Fast: rows split across the pool; max, exp and sums as
// vectorizable loops (exp from fast_math.h).
#include "kernels/softmax.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "kernels/fast_math.h"
#include "kernels/grain.h"

namespace px::kernels {

void softmax(int64_t rows, int64_t cols, const float* x, float* y) {
  px::parallel_for(0, rows, detail::row_grain(cols), [=](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;  // may alias x
      float m = detail::max(xr, cols);
      float inv = 1.0f / detail::exp_shifted_sum(xr, yr, cols, m);
      for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
  });
}

void softmax_backward(int64_t rows, int64_t cols, const float* y, const float* dy, float* dx) {
  px::parallel_for(0, rows, detail::row_grain(cols), [=](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* __restrict yr = y + r * cols;
      const float* dyr = dy + r * cols;
      float* dxr = dx + r * cols;  // may alias dy
      float d = detail::dot(yr, dyr, cols);
      for (int64_t c = 0; c < cols; ++c) dxr[c] = yr[c] * (dyr[c] - d);
    }
  });
}

namespace ref {

void softmax(int64_t rows, int64_t cols, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, xr[c]);
    double total = 0.0;
    for (int64_t c = 0; c < cols; ++c) total += std::exp(static_cast<double>(xr[c]) - m);
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = static_cast<float>(std::exp(static_cast<double>(xr[c]) - m) / total);
  }
}

void softmax_backward(int64_t rows, int64_t cols, const float* y, const float* dy, float* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    double d = 0.0;
    for (int64_t c = 0; c < cols; ++c) d += static_cast<double>(y[r * cols + c]) * dy[r * cols + c];
    for (int64_t c = 0; c < cols; ++c)
      dx[r * cols + c] = static_cast<float>(y[r * cols + c] * (dy[r * cols + c] - d));
  }
}

}  // namespace ref
}  // namespace px::kernels
