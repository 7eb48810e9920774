// Softmax cross-entropy. Fast: rows split across the pool; the loss is the
// sum of per-row losses in row order (in double), so it does not depend on
// the thread count.
#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/fast_math.h"
#include "kernels/grain.h"

namespace px::kernels {
namespace {

// sum_i exp(x[i] - shift), through a per-thread row buffer so both loops vectorize.
float sum_exp_shifted(const float* x, int64_t n, float shift) {
  thread_local std::vector<float> row;
  if (static_cast<int64_t>(row.size()) < n) row.resize(static_cast<size_t>(n));
  return detail::exp_shifted_sum(x, row.data(), n, shift);
}

}  // namespace

float cross_entropy(int64_t N, int64_t V, const float* logits, const int32_t* targets,
                    float scale, float* lse) {
  std::vector<float> row_loss(static_cast<size_t>(N));
  px::parallel_for(0, N, detail::row_grain(V), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* xr = logits + n * V;
      float m = detail::max(xr, V);
      float l = m + std::log(sum_exp_shifted(xr, V, m));
      lse[n] = l;
      row_loss[static_cast<size_t>(n)] = l - xr[targets[n]];
    }
  });
  double total = 0.0;
  for (float l : row_loss) total += l;
  return static_cast<float>(scale * total);
}

void cross_entropy_backward(int64_t N, int64_t V, const float* logits, const int32_t* targets,
                            const float* lse, float scale, float dloss, float* dlogits) {
  const float k = dloss * scale;
  px::parallel_for(0, N, detail::row_grain(V), [=](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* __restrict xr = logits + n * V;
      float* __restrict dr = dlogits + n * V;
      const float l = lse[n];
      for (int64_t v = 0; v < V; ++v) dr[v] = k * detail::exp_approx(xr[v] - l);
      dr[targets[n]] -= k;
    }
  });
}

namespace ref {

float cross_entropy(int64_t N, int64_t V, const float* logits, const int32_t* targets,
                    float scale, float* lse) {
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = logits + n * V;
    double m = -INFINITY;
    for (int64_t v = 0; v < V; ++v) m = std::max(m, static_cast<double>(xr[v]));
    double s = 0.0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(xr[v] - m);
    double l = m + std::log(s);
    lse[n] = static_cast<float>(l);
    total += l - xr[targets[n]];
  }
  return static_cast<float>(scale * total);
}

void cross_entropy_backward(int64_t N, int64_t V, const float* logits, const int32_t* targets,
                            const float* lse, float scale, float dloss, float* dlogits) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < V; ++v) {
      double p = std::exp(static_cast<double>(logits[n * V + v]) - lse[n]);
      double onehot = v == targets[n] ? 1.0 : 0.0;
      dlogits[n * V + v] = static_cast<float>(static_cast<double>(dloss) * scale * (p - onehot));
    }
  }
}

}  // namespace ref
}  // namespace px::kernels
