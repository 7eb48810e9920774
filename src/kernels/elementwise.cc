// Pointwise and bias kernels. Fast versions are flat loops over contiguous
// floats (vectorized by the compiler) split across the pool in large chunks;
// bias_grad splits columns, so its sums are independent of the thread count.
#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/fast_math.h"
#include "kernels/grain.h"

namespace px::kernels {
namespace {

using detail::kCheapGrain;
using detail::kGrain;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

template <typename Body>
void pointwise(int64_t n, int64_t grain, Body body) {
  px::parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) { body(lo, hi); });
}

// An output stored in bf16: `compute(lo, hi, out)` writes elements
// [lo, hi) in fp32 into a buffer small enough to stay in L1, which is then
// narrowed into y (to_bf16's rounding). One pass over y's memory.
constexpr int64_t kNarrowChunk = 2048;
template <typename Compute>
void narrowed(int64_t lo, int64_t hi, bf16* y, Compute compute) {
  float buffer[kNarrowChunk];
  for (int64_t c = lo; c < hi; c += kNarrowChunk) {
    const int64_t e = std::min(hi, c + kNarrowChunk);
    compute(c, e, buffer);
    to_bf16(e - c, buffer, y + c);
  }
}

}  // namespace

void add(int64_t n, const float* a, const float* b, float* out) {
  pointwise(n, kCheapGrain, [=](int64_t lo, int64_t hi) {
    const float* __restrict pa = a;
    const float* __restrict pb = b;
    float* __restrict po = out;
    for (int64_t i = lo; i < hi; ++i) po[i] = pa[i] + pb[i];
  });
}

void add_inplace(int64_t n, const float* a, float* out) {
  pointwise(n, kCheapGrain, [=](int64_t lo, int64_t hi) {
    const float* __restrict pa = a;
    float* __restrict po = out;
    for (int64_t i = lo; i < hi; ++i) po[i] += pa[i];
  });
}

void scale(int64_t n, float alpha, const float* x, float* out) {
  // x may equal out (in-place scaling), so no __restrict here.
  pointwise(n, kCheapGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = alpha * x[i];
  });
}

void mul(int64_t n, const float* a, const float* b, float* out) {
  pointwise(n, kCheapGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = a[i] * b[i];
  });
}

void add_bias(int64_t rows, int64_t cols, const float* x, const float* bias, float* y) {
  // One read of x and one write of y (copying x first and adding in place
  // made two passes over y). No __restrict on x and y: they may alias.
  int64_t grain = detail::rows_grain(cols, kCheapGrain);
  px::parallel_for(0, rows, grain, [=](int64_t lo, int64_t hi) {
    const float* __restrict pb = bias;
    for (int64_t r = lo; r < hi; ++r) {
      const float* in = x + r * cols;
      float* out = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = in[c] + pb[c];
    }
  });
}

void add_bias(int64_t rows, int64_t cols, const float* x, const float* bias, bf16* y) {
  int64_t grain = detail::rows_grain(cols, kCheapGrain);
  px::parallel_for(0, rows, grain, [=](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      narrowed(r * cols, (r + 1) * cols, y, [=](int64_t a, int64_t b, float* out) {
        const float* __restrict in = x + a;
        const float* __restrict pb = bias + (a - r * cols);
        for (int64_t c = 0; c < b - a; ++c) out[c] = in[c] + pb[c];
      });
  });
}

void bias_grad(int64_t rows, int64_t cols, const float* dy, float* dbias) {
  // Each chunk owns a column range and walks all rows in order.
  px::parallel_for(0, cols, detail::rows_grain(rows, kCheapGrain), [=](int64_t c0, int64_t c1) {
    float* __restrict out = dbias;
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict row = dy + r * cols;
      for (int64_t c = c0; c < c1; ++c) out[c] += row[c];
    }
  });
}

void relu(int64_t n, const float* x, float* y) {
  pointwise(n, kCheapGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  });
}

void relu_backward(int64_t n, const float* y, const float* dy, float* dx) {
  pointwise(n, kCheapGrain, [=](int64_t lo, int64_t hi) {
    // dy read unconditionally: a select the compiler vectorises, not a
    // branch on the sign of y (mispredicted half the time on real data).
    for (int64_t i = lo; i < hi; ++i) {
      const float g = dy[i];
      dx[i] = y[i] > 0.0f ? g : 0.0f;
    }
  });
}

namespace {

inline float widen(float v) { return v; }
inline float widen(bf16 v) { return to_float(v); }
inline detail::f32x16 load16(const float* p) { return detail::load16(p); }
inline detail::f32x16 load16(const bf16* p) { return detail::load16_bf16(p); }

// GELU and its derivative at v, written once for one float and for 16
// lanes (fast_math.h's vector types): the compiler vectorized the plain
// loop at half width only. x of either storage is widened as it is loaded.
template <typename F>
F gelu_at(F v) {
  // 0.5 (1 + tanh(u)) = e / (e + 1) with e = exp(2u): exact in both tails.
  F e = detail::exp_approx(2.0f * kSqrt2OverPi * (v + kGeluCoeff * v * v * v));
  return v * (e / (e + 1.0f));
}

template <typename F>
F gelu_slope_at(F v) {
  F v2 = v * v;
  // With e = exp(2u): 0.5 (1 + tanh u) = e/(e+1), 1 - tanh^2 u = 4e/(e+1)^2.
  F e = detail::exp_approx(2.0f * kSqrt2OverPi * (v + kGeluCoeff * v2 * v));
  F inv = 1.0f / (e + 1.0f);
  F du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * v2);
  return e * inv + 2.0f * v * (e * inv) * inv * du;
}

template <typename X>
void gelu_span(int64_t n, const X* __restrict x, float* __restrict y) {
  int64_t i = 0;
  for (; i + detail::kLanes <= n; i += detail::kLanes) detail::store16(y + i, gelu_at(load16(x + i)));
  for (; i < n; ++i) y[i] = gelu_at(widen(x[i]));
}

template <typename X>
void gelu_backward_span(int64_t n, const X* __restrict x, const float* __restrict dy, float* __restrict dx) {
  int64_t i = 0;
  for (; i + detail::kLanes <= n; i += detail::kLanes)
    detail::store16(dx + i, gelu_slope_at(load16(x + i)) * detail::load16(dy + i));
  for (; i < n; ++i) dx[i] = gelu_slope_at(widen(x[i])) * dy[i];
}

template <typename X, typename Y>
void gelu_any(int64_t n, const X* x, Y* y) {
  pointwise(n, kGrain, [=](int64_t lo, int64_t hi) {
    if constexpr (std::is_same_v<Y, float>) {
      gelu_span(hi - lo, x + lo, y + lo);
    } else {
      narrowed(lo, hi, y, [=](int64_t a, int64_t b, float* out) { gelu_span(b - a, x + a, out); });
    }
  });
}

template <typename X>
void gelu_backward_any(int64_t n, const X* x, const float* dy, float* dx) {
  pointwise(n, kGrain, [=](int64_t lo, int64_t hi) { gelu_backward_span(hi - lo, x + lo, dy + lo, dx + lo); });
}

// bias_grad's schedule: each part owns a column range and walks every row
// in order, so the sums do not depend on the thread count. A row's part is
// done in L1-sized pieces: dx in fp32 into a buffer, added to the sums,
// then stored (narrowed if bf16).
template <typename X, typename Y>
void gelu_backward_bias_any(int64_t rows, int64_t cols, const X* x, const float* dy, Y* dx, float* dbias) {
  px::parallel_for(0, cols, detail::rows_grain(rows, kGrain), [=](int64_t c0, int64_t c1) {
    float buffer[kNarrowChunk];
    for (int64_t c = c0; c < c1; ++c) dbias[c] = 0.0f;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t a = c0; a < c1; a += kNarrowChunk) {
        const int64_t b = std::min(c1, a + kNarrowChunk), at = r * cols + a;
        gelu_backward_span(b - a, x + at, dy + at, buffer);
        float* __restrict sums = dbias + a;
        for (int64_t i = 0; i < b - a; ++i) sums[i] += buffer[i];
        if constexpr (std::is_same_v<Y, float>) {
          std::copy(buffer, buffer + (b - a), dx + at);
        } else {
          to_bf16(b - a, buffer, dx + at);
        }
      }
  });
}

}  // namespace

void gelu_backward_bias(int64_t rows, int64_t cols, const float* x, const float* dy, float* dx, float* dbias) {
  gelu_backward_bias_any(rows, cols, x, dy, dx, dbias);
}
void gelu_backward_bias(int64_t rows, int64_t cols, const bf16* x, const float* dy, float* dx, float* dbias) {
  gelu_backward_bias_any(rows, cols, x, dy, dx, dbias);
}
void gelu_backward_bias(int64_t rows, int64_t cols, const bf16* x, const float* dy, bf16* dx, float* dbias) {
  gelu_backward_bias_any(rows, cols, x, dy, dx, dbias);
}

void gelu(int64_t n, const float* x, float* y) { gelu_any(n, x, y); }
void gelu(int64_t n, const bf16* x, float* y) { gelu_any(n, x, y); }
void gelu(int64_t n, const bf16* x, bf16* y) { gelu_any(n, x, y); }
void gelu_backward(int64_t n, const float* x, const float* dy, float* dx) { gelu_backward_any(n, x, dy, dx); }
void gelu_backward(int64_t n, const bf16* x, const float* dy, float* dx) { gelu_backward_any(n, x, dy, dx); }

float sum_squares(int64_t n, const float* x) {
  // Fixed 4096-element blocks, each summed in 32 double lanes: four
  // independent vectors of 8, so the adds are not one dependency chain (8
  // lanes, one vector, ran at the add's latency: 0.17 ns an element). The
  // result does not depend on the thread count.
  constexpr int64_t kBlock = 4096, kLanes = 32;
  int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  px::parallel_for(0, blocks, kCheapGrain / kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
      double acc[kLanes] = {};
      int64_t i = lo;
      for (; i + kLanes <= hi; i += kLanes)
        for (int64_t j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(x[i + j]) * x[i + j];
      for (; i < hi; ++i) acc[0] += static_cast<double>(x[i]) * x[i];
      double s = 0.0;
      for (double a : acc) s += a;
      partial[static_cast<size_t>(b)] = s;
    }
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return static_cast<float>(total);
}

namespace ref {

void add_bias(int64_t rows, int64_t cols, const float* x, const float* bias, float* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] + bias[c];
}

void bias_grad(int64_t rows, int64_t cols, const float* dy, float* dbias) {
  for (int64_t c = 0; c < cols; ++c) {
    double acc = 0.0;
    for (int64_t r = 0; r < rows; ++r) acc += dy[r * cols + c];
    dbias[c] += static_cast<float>(acc);
  }
}

void gelu(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    double u = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
    y[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(u)));
  }
}

void gelu_backward(int64_t n, const float* x, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    double k = std::sqrt(2.0 / M_PI);
    double t = std::tanh(k * (v + 0.044715 * v * v * v));
    double grad = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v);
    dx[i] = static_cast<float>(grad * dy[i]);
  }
}

void gelu_backward_bias(int64_t rows, int64_t cols, const float* x, const float* dy, float* dx, float* dbias) {
  gelu_backward(rows * cols, x, dy, dx);
  std::fill(dbias, dbias + cols, 0.0f);
  bias_grad(rows, cols, dx, dbias);
}

float sum_squares(int64_t n, const float* x) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(acc);
}

}  // namespace ref
}  // namespace px::kernels
