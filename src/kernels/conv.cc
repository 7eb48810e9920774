// Conv2d, fast path: im2col + one GEMM per image, images spread over the pool
// with BLAS serial inside; under bf16 the same GEMMs mixed (gemm_bf16.h). Backward: dcol = w^T dy then col2im for dx, and
// dw += dy col^T summed per chunk of images, chunks combined in image order.
// Legend: N batch, Ci/Co channels, H,W input, Kh,Kw kernel, Ho,Wo output,
// K = Ci*Kh*Kw (GEMM depth), P = Ho*Wo (pixels per output plane).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/blas.h"
#include "kernels/conv.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm_bf16.h"

namespace px::kernels {
namespace {

bool is_pointwise(const Conv2dShape& s) {
  return s.Kh == 1 && s.Kw == 1 && s.stride == 1 && s.pad == 0;
}

void check_shape(const Conv2dShape& s) {
  PX_CHECK(s.stride >= 1 && s.pad >= 0, "stride={} pad={}", s.stride, s.pad);
  PX_CHECK(s.Ho() >= 1 && s.Wo() >= 1, "output {}x{}", s.Ho(), s.Wo());
}

// col (K, P) from one image x (Ci, H, W).
void im2col(const Conv2dShape& s, const float* x, float* col) {
  const int64_t Ho = s.Ho(), Wo = s.Wo(), P = Ho * Wo;
  for (int64_t ci = 0; ci < s.Ci; ++ci)
    for (int64_t kh = 0; kh < s.Kh; ++kh)
      for (int64_t kw = 0; kw < s.Kw; ++kw) {
        float* row = col + ((ci * s.Kh + kh) * s.Kw + kw) * P;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const int64_t ih = oh * s.stride - s.pad + kh;
          float* out = row + oh * Wo;
          if (ih < 0 || ih >= s.H) {
            std::fill(out, out + Wo, 0.0f);
            continue;
          }
          const float* in = x + (ci * s.H + ih) * s.W;
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const int64_t iw = ow * s.stride - s.pad + kw;
            out[ow] = (iw >= 0 && iw < s.W) ? in[iw] : 0.0f;
          }
        }
      }
}

// dx (Ci, H, W) += scatter of dcol (K, P).
void col2im(const Conv2dShape& s, const float* dcol, float* dx) {
  const int64_t Ho = s.Ho(), Wo = s.Wo(), P = Ho * Wo;
  for (int64_t ci = 0; ci < s.Ci; ++ci)
    for (int64_t kh = 0; kh < s.Kh; ++kh)
      for (int64_t kw = 0; kw < s.Kw; ++kw) {
        const float* row = dcol + ((ci * s.Kh + kh) * s.Kw + kw) * P;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const int64_t ih = oh * s.stride - s.pad + kh;
          if (ih < 0 || ih >= s.H) continue;
          float* out = dx + (ci * s.H + ih) * s.W;
          const float* in = row + oh * Wo;
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const int64_t iw = ow * s.stride - s.pad + kw;
            if (iw >= 0 && iw < s.W) out[iw] += in[ow];
          }
        }
      }
}

std::vector<float>& scratch() {
  thread_local std::vector<float> buffer;
  return buffer;
}

// Runs body(lo, hi) over image ranges: across the pool with serial BLAS when
// there are enough images, otherwise inline with BLAS free to thread.
template <typename Body>
void for_images(int64_t N, Body body) {
  if (px::num_threads() > 1 && N >= 2) {
    detail::SerialBlasScope serial;
    px::parallel_for(0, N, 1, body);
  } else {
    body(0, N);
  }
}

// The products of one image, fp32 by BLAS or mixed bf16 (operands rounded
// to bf16, fp32 accumulation): C = op(A) op(B) + beta C with gemm.h's
// conventions. The weights are rounded once per call, not per image.
struct Fp32Products {
  void operator()(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float beta, float* C, int64_t ldc) const {
    detail::sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  }
};

struct Bf16Products {
  const float* w = nullptr;  // its rounded copy stands in for it
  std::vector<bf16> w_rounded;
  Bf16Products(const float* weights, int64_t count) : w(weights), w_rounded(static_cast<size_t>(count)) {
    to_bf16(count, weights, w_rounded.data());
  }
  Bf16Operand operand(const float* x, int64_t ld) const {
    if (x == w) return {.rounded = w_rounded.data(), .ld = ld};
    return {.f32 = x, .ld = ld};
  }
  void operator()(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float beta, float* C, int64_t ldc) const {
    gemm_mixed_bf16(ta, tb, M, N, K, 1.0f, operand(A, lda), operand(B, ldb), beta, C, ldc);
  }
};

template <typename Products>
void conv2d_with(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                 const Products& products) {
  check_shape(s);
  const int64_t K = s.Ci * s.Kh * s.Kw, P = s.Ho() * s.Wo();
  for_images(s.N, [&](int64_t lo, int64_t hi) {
    std::vector<float>& col = scratch();
    if (!is_pointwise(s)) col.resize(static_cast<size_t>(K * P));
    for (int64_t n = lo; n < hi; ++n) {
      const float* xn = x + n * s.Ci * s.H * s.W;
      float* yn = y + n * s.Co * P;
      if (!is_pointwise(s)) im2col(s, xn, col.data());
      const float* cols = is_pointwise(s) ? xn : col.data();
      products(false, false, s.Co, P, K, w, K, cols, P, 0.0f, yn, P);
      if (bias != nullptr)
        for (int64_t co = 0; co < s.Co; ++co)
          for (int64_t p = 0; p < P; ++p) yn[co * P + p] += bias[co];
    }
  });
}

template <typename Products>
void conv2d_backward_with(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dx,
                          float* dw, float* dbias, const Products& products) {
  check_shape(s);
  const int64_t K = s.Ci * s.Kh * s.Kw, P = s.Ho() * s.Wo(), image = s.Ci * s.H * s.W;
  std::mutex mutex;
  std::vector<std::pair<int64_t, std::vector<float>>> partial_dw;  // (first image, dw sum)
  for_images(s.N, [&](int64_t lo, int64_t hi) {
    std::vector<float>& col = scratch();
    col.resize(static_cast<size_t>(2 * K * P));
    float* cols = col.data();
    float* dcol = col.data() + K * P;
    std::vector<float> dw_local(static_cast<size_t>(s.Co * K), 0.0f);
    for (int64_t n = lo; n < hi; ++n) {
      const float* xn = x + n * image;
      const float* dyn = dy + n * s.Co * P;
      const float* xcol = xn;
      if (!is_pointwise(s)) {
        im2col(s, xn, cols);
        xcol = cols;
      }
      products(false, true, s.Co, K, P, dyn, P, xcol, P, 1.0f, dw_local.data(), K);
      if (dx == nullptr) continue;
      float* dxn = dx + n * image;
      if (is_pointwise(s)) {
        products(true, false, K, P, s.Co, w, K, dyn, P, 0.0f, dxn, P);
      } else {
        products(true, false, K, P, s.Co, w, K, dyn, P, 0.0f, dcol, P);
        std::fill(dxn, dxn + image, 0.0f);
        col2im(s, dcol, dxn);
      }
    }
    std::lock_guard lock(mutex);
    partial_dw.emplace_back(lo, std::move(dw_local));
  });
  std::sort(partial_dw.begin(), partial_dw.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [first, part] : partial_dw)
    for (int64_t i = 0; i < s.Co * K; ++i) dw[i] += part[static_cast<size_t>(i)];
  if (dbias != nullptr) {
    for (int64_t co = 0; co < s.Co; ++co) {
      double acc = 0.0;
      for (int64_t n = 0; n < s.N; ++n) {
        const float* plane = dy + (n * s.Co + co) * P;
        for (int64_t p = 0; p < P; ++p) acc += plane[p];
      }
      dbias[co] += static_cast<float>(acc);
    }
  }
}

}  // namespace

void conv2d(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  conv2d_with(s, x, w, bias, y, Fp32Products{});
}

void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* dbias) {
  conv2d_backward_with(s, x, w, dy, dx, dw, dbias, Fp32Products{});
}

void conv2d_mixed_bf16(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  require_avx512_bf16("bf16 convolution");
  conv2d_with(s, x, w, bias, y, Bf16Products(w, s.Co * s.Ci * s.Kh * s.Kw));
}

void conv2d_backward_mixed_bf16(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                                float* dx, float* dw, float* dbias) {
  require_avx512_bf16("bf16 convolution");
  conv2d_backward_with(s, x, w, dy, dx, dw, dbias, Bf16Products(w, s.Co * s.Ci * s.Kh * s.Kw));
}

}  // namespace px::kernels
