// Causal self-attention, reference: the textbook loops, in double, one
// (batch, head) at a time. Legend: B batch, T time, H heads, D head dim, C = H*D.
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
  int64_t out_index(int64_t b, int64_t t, int64_t h, int64_t d) const {
    return ((b * T + t) * H + h) * D + d;
  }
};

}  // namespace

void attention(int64_t B, int64_t T, int64_t H, int64_t D, const float* qkv, float* out,
               float* probs) {
  const HeadView ix{T, H, D};
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> s(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      float* p = probs + (b * H + h) * T * T;
      for (int64_t t = 0; t < T; ++t) {
        double m = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d)
            dot += static_cast<double>(qkv[ix.qkv_index(b, t, 0, h, d)]) *
                   qkv[ix.qkv_index(b, j, 1, h, d)];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double total = 0.0;
        for (int64_t j = 0; j <= t; ++j) total += std::exp(s[j] - m);
        for (int64_t j = 0; j < T; ++j)
          p[t * T + j] = j <= t ? static_cast<float>(std::exp(s[j] - m) / total) : 0.0f;
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j <= t; ++j)
            acc += static_cast<double>(p[t * T + j]) * qkv[ix.qkv_index(b, j, 2, h, d)];
          out[ix.out_index(b, t, h, d)] = static_cast<float>(acc);
        }
      }
    }
  }
}

void attention_backward(int64_t B, int64_t T, int64_t H, int64_t D, const float* qkv,
                        const float* probs, const float* dout, float* dqkv) {
  const HeadView ix{T, H, D};
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> dp(static_cast<size_t>(T));
  for (int64_t i = 0; i < B * T * 3 * H * D; ++i) dqkv[i] = 0.0f;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const float* p = probs + (b * H + h) * T * T;
      for (int64_t t = 0; t < T; ++t) {
        // dP[t, j] = <dout[t], v[j]>;  dV[j] += P[t, j] dout[t]
        for (int64_t j = 0; j <= t; ++j) {
          double acc = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            double g = dout[ix.out_index(b, t, h, d)];
            acc += g * qkv[ix.qkv_index(b, j, 2, h, d)];
            dqkv[ix.qkv_index(b, j, 2, h, d)] += static_cast<float>(p[t * T + j] * g);
          }
          dp[j] = acc;
        }
        double row_dot = 0.0;
        for (int64_t j = 0; j <= t; ++j) row_dot += p[t * T + j] * dp[j];
        // dS = P (dP - row_dot);  S = scale q k^T
        for (int64_t j = 0; j <= t; ++j) {
          double ds = p[t * T + j] * (dp[j] - row_dot) * scale;
          for (int64_t d = 0; d < D; ++d) {
            dqkv[ix.qkv_index(b, t, 0, h, d)] +=
                static_cast<float>(ds * qkv[ix.qkv_index(b, j, 1, h, d)]);
            dqkv[ix.qkv_index(b, j, 1, h, d)] +=
                static_cast<float>(ds * qkv[ix.qkv_index(b, t, 0, h, d)]);
          }
        }
      }
    }
  }
}

}  // namespace px::kernels::ref
