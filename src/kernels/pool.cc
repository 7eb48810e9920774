// Max pooling with window = stride = k. Ties keep the first maximum in
// row-major window order (as torch does). Fast: (n, c) planes over the pool.
#include "kernels/pool.h"

#include <algorithm>

#include "core/thread_pool.h"
#include "kernels/grain.h"

namespace px::kernels {
namespace {

// One (n, c) plane: x (H, W) -> y (Ho, Wo), argmax (Ho, Wo).
void pool_plane(int64_t H, int64_t W, int64_t k, const float* x, float* y, int32_t* argmax) {
  const int64_t Ho = H / k, Wo = W / k;
  for (int64_t oh = 0; oh < Ho; ++oh)
    for (int64_t ow = 0; ow < Wo; ++ow) {
      int64_t best = oh * k * W + ow * k;
      float best_value = x[best];
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < k; ++j) {
          const int64_t at = (oh * k + i) * W + ow * k + j;
          if (x[at] > best_value) {
            best_value = x[at];
            best = at;
          }
        }
      y[oh * Wo + ow] = best_value;
      argmax[oh * Wo + ow] = static_cast<int32_t>(best);
    }
}

}  // namespace

void maxpool2d(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, const float* x, float* y,
               int32_t* argmax) {
  const int64_t out_plane = (H / k) * (W / k);
  const int64_t grain = detail::rows_grain(H * W, detail::kGrain);
  px::parallel_for(0, N * C, grain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      pool_plane(H, W, k, x + i * H * W, y + i * out_plane, argmax + i * out_plane);
  });
}

void maxpool2d_backward(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k,
                        const int32_t* argmax, const float* dy, float* dx) {
  const int64_t out_plane = (H / k) * (W / k);
  const int64_t grain = detail::rows_grain(H * W, detail::kCheapGrain);
  px::parallel_for(0, N * C, grain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* plane = dx + i * H * W;
      std::fill(plane, plane + H * W, 0.0f);
      for (int64_t o = 0; o < out_plane; ++o) plane[argmax[i * out_plane + o]] += dy[i * out_plane + o];
    }
  });
}

namespace ref {

void maxpool2d(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, const float* x, float* y,
               int32_t* argmax) {
  const int64_t Ho = H / k, Wo = W / k;
  for (int64_t p = 0; p < N * C; ++p)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        float best = 0.0f;
        int32_t where = -1;
        for (int64_t h = oh * k; h < oh * k + k; ++h)
          for (int64_t w = ow * k; w < ow * k + k; ++w)
            if (where < 0 || x[p * H * W + h * W + w] > best) {
              best = x[p * H * W + h * W + w];
              where = static_cast<int32_t>(h * W + w);
            }
        y[(p * Ho + oh) * Wo + ow] = best;
        argmax[(p * Ho + oh) * Wo + ow] = where;
      }
}

}  // namespace ref
}  // namespace px::kernels
