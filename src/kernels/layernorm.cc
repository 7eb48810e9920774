// LayerNorm over rows. Fast: rows split across the pool, two-pass mean and
// variance per row in vectorizable lane sums; dgamma/dbeta are reduced over
// column ranges so they do not depend on the thread count.
#include "kernels/layernorm.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "kernels/fast_math.h"
#include "kernels/grain.h"

namespace px::kernels {
namespace {

using detail::kLanes;

float centered_sum_squares(const float* __restrict x, int64_t n, float mean) {
  detail::f32x16 acc = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    detail::f32x16 d = detail::load16(x + i) - mean;
    acc += d * d;
  }
  float s = detail::hsum(acc);
  for (; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  return s;
}

}  // namespace

void layernorm(int64_t rows, int64_t C, float eps, const float* x, const float* gamma,
               const float* beta, float* y, float* mean, float* rstd) {
  px::parallel_for(0, rows, detail::row_grain(C), [=](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* __restrict xr = x + r * C;
      float* __restrict yr = y + r * C;
      const float* __restrict g = gamma;
      const float* __restrict b = beta;
      float m = detail::sum(xr, C) / static_cast<float>(C);
      float var = centered_sum_squares(xr, C, m) / static_cast<float>(C);
      float s = 1.0f / std::sqrt(var + eps);
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * s * g[c] + b[c];
      mean[r] = m;
      rstd[r] = s;
    }
  });
}

void layernorm_backward(int64_t rows, int64_t C, const float* x, const float* gamma,
                        const float* mean, const float* rstd, const float* dy, float* dx,
                        float* dgamma, float* dbeta) {
  // dx = rstd * (g*dy - mean(g*dy) - xhat * mean(g*dy*xhat)), xhat = (x-mean)*rstd.
  px::parallel_for(0, rows, detail::row_grain(C), [=](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* __restrict xr = x + r * C;
      const float* __restrict dyr = dy + r * C;
      const float* __restrict g = gamma;
      float* __restrict dxr = dx + r * C;
      const float m = mean[r], s = rstd[r];
      detail::f32x16 acc_g = {}, acc_gx = {};
      int64_t c = 0;
      for (; c + kLanes <= C; c += kLanes) {
        detail::f32x16 gd = detail::load16(g + c) * detail::load16(dyr + c);
        acc_g += gd;
        acc_gx += gd * ((detail::load16(xr + c) - m) * s);
      }
      float sum_g = detail::hsum(acc_g), sum_gx = detail::hsum(acc_gx);
      for (; c < C; ++c) {
        float gd = g[c] * dyr[c];
        sum_g += gd;
        sum_gx += gd * (xr[c] - m) * s;
      }
      const float mean_g = sum_g / static_cast<float>(C);
      const float mean_gx = sum_gx / static_cast<float>(C);
      for (c = 0; c < C; ++c)
        dxr[c] = s * (g[c] * dyr[c] - mean_g - (xr[c] - m) * s * mean_gx);
    }
  });
  // Parameter grads: each chunk owns a column range and walks every row.
  px::parallel_for(0, C, detail::rows_grain(rows, detail::kCheapGrain), [=](int64_t c0, int64_t c1) {
    float* __restrict dg = dgamma;
    float* __restrict db = dbeta;
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict xr = x + r * C;
      const float* __restrict dyr = dy + r * C;
      const float m = mean[r], s = rstd[r];
      for (int64_t c = c0; c < c1; ++c) {
        dg[c] += dyr[c] * (xr[c] - m) * s;
        db[c] += dyr[c];
      }
    }
  });
}

namespace ref {

void layernorm(int64_t rows, int64_t C, float eps, const float* x, const float* gamma,
               const float* beta, float* y, float* mean, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    double m = 0.0;
    for (int64_t c = 0; c < C; ++c) m += xr[c];
    m /= static_cast<double>(C);
    double var = 0.0;
    for (int64_t c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
    var /= static_cast<double>(C);
    double s = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c)
      y[r * C + c] = static_cast<float>((xr[c] - m) * s * gamma[c] + beta[c]);
    mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(s);
  }
}

void layernorm_backward(int64_t rows, int64_t C, const float* x, const float* gamma,
                        const float* mean, const float* rstd, const float* dy, float* dx,
                        float* dgamma, float* dbeta) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (xr[c] - mean[r]) * static_cast<double>(rstd[r]);
      sum_g += gamma[c] * dyr[c];
      sum_gx += gamma[c] * dyr[c] * xhat;
      dgamma[c] += static_cast<float>(dyr[c] * xhat);
      dbeta[c] += dyr[c];
    }
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (xr[c] - mean[r]) * static_cast<double>(rstd[r]);
      double g = static_cast<double>(gamma[c]) * dyr[c];
      dx[r * C + c] = static_cast<float>(rstd[r] * (g - sum_g / C - xhat * sum_gx / C));
    }
  }
}

}  // namespace ref
}  // namespace px::kernels
