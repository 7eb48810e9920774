// Self-attention, reference: the textbook loops in double, one (batch,
// head) and one row at a time, the row's probabilities made whole.
// Legend: B batch, T time, H heads, D head dim, C = H*D.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention.h"

namespace px::kernels::ref {
namespace {

struct HeadView {
  int64_t T, H, D;
  // Element (t, d) of q (which=0), k (1) or v (2) for batch b, head h.
  int64_t qkv_index(int64_t b, int64_t t, int which, int64_t h, int64_t d) const {
    return (((b * T + t) * 3 + which) * H + h) * D + d;
  }
  int64_t out_index(int64_t b, int64_t t, int64_t h, int64_t d) const { return ((b * T + t) * H + h) * D + d; }
};

// Row t's probabilities p[0, n) over the n keys it sees; returns its lse.
double row_softmax(const AttentionDims& a, const float* qkv, int64_t b, int64_t h, int64_t t, std::vector<double>& p,
                   int64_t& n) {
  const HeadView ix{a.T, a.H, a.D};
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.D));
  n = a.causal ? t + 1 : a.T;
  double m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    double dot = 0.0;
    for (int64_t d = 0; d < a.D; ++d)
      dot += static_cast<double>(qkv[ix.qkv_index(b, t, 0, h, d)]) * qkv[ix.qkv_index(b, j, 1, h, d)];
    p[j] = dot * scale;
    m = std::max(m, p[j]);
  }
  double total = 0.0;
  for (int64_t j = 0; j < n; ++j) total += std::exp(p[j] - m);
  for (int64_t j = 0; j < n; ++j) p[j] = std::exp(p[j] - m) / total;
  return m + std::log(total);
}

}  // namespace

void attention(const AttentionDims& a, const float* qkv, float* out, float* lse) {
  const HeadView ix{a.T, a.H, a.D};
  std::vector<double> p(static_cast<size_t>(a.T));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.H; ++h)
      for (int64_t t = 0; t < a.T; ++t) {
        int64_t n = 0;
        lse[(b * a.H + h) * a.T + t] = static_cast<float>(row_softmax(a, qkv, b, h, t, p, n));
        for (int64_t d = 0; d < a.D; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < n; ++j) acc += p[j] * qkv[ix.qkv_index(b, j, 2, h, d)];
          out[ix.out_index(b, t, h, d)] = static_cast<float>(acc);
        }
      }
}

void attention_backward(const AttentionDims& a, const float* qkv, const float* dout, float* dqkv) {
  const HeadView ix{a.T, a.H, a.D};
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.D));
  std::vector<double> p(static_cast<size_t>(a.T)), dp(static_cast<size_t>(a.T));
  std::vector<double> grad(static_cast<size_t>(a.B * a.T * 3 * a.H * a.D), 0.0);
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t h = 0; h < a.H; ++h) {
      for (int64_t t = 0; t < a.T; ++t) {
        int64_t n = 0;
        row_softmax(a, qkv, b, h, t, p, n);
        // dP[t, j] = <dout[t], v[j]>;  dV[j] += P[t, j] dout[t]
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0.0;
          for (int64_t d = 0; d < a.D; ++d) {
            const double g = dout[ix.out_index(b, t, h, d)];
            acc += g * qkv[ix.qkv_index(b, j, 2, h, d)];
            grad[static_cast<size_t>(ix.qkv_index(b, j, 2, h, d))] += p[j] * g;
          }
          dp[j] = acc;
        }
        double row_dot = 0.0;
        for (int64_t j = 0; j < n; ++j) row_dot += p[j] * dp[j];
        // dS = P (dP - row_dot);  S = scale q kᵀ
        for (int64_t j = 0; j < n; ++j) {
          const double ds = p[j] * (dp[j] - row_dot) * scale;
          for (int64_t d = 0; d < a.D; ++d) {
            grad[static_cast<size_t>(ix.qkv_index(b, t, 0, h, d))] += ds * qkv[ix.qkv_index(b, j, 1, h, d)];
            grad[static_cast<size_t>(ix.qkv_index(b, j, 1, h, d))] += ds * qkv[ix.qkv_index(b, t, 0, h, d)];
          }
        }
      }
    }
  }
  for (size_t i = 0; i < grad.size(); ++i) dqkv[i] = static_cast<float>(grad[i]);
}

}  // namespace px::kernels::ref
