// 2-D convolution, NCHW, cross-correlation as in torch.nn.Conv2d.
// Legend: N batch, Ci/Co in/out channels, H,W input, Kh,Kw kernel, Ho,Wo output.
//   x (N, Ci, H, W), w (Co, Ci, Kh, Kw), bias (Co) or null, y (N, Co, Ho, Wo)
//   Ho = (H + 2*pad - Kh) / stride + 1
#pragma once

#include <cstdint>

namespace px::kernels {

struct Conv2dShape {
  int64_t N, Ci, H, W, Co, Kh, Kw, stride, pad;
  int64_t Ho() const { return (H + 2 * pad - Kh) / stride + 1; }
  int64_t Wo() const { return (W + 2 * pad - Kw) / stride + 1; }
};

void conv2d(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y);
// dx overwritten (if non-null); dw, dbias accumulated (+=), dbias may be null.
void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* dbias);

// The same under bf16 mixed precision: every product's operands (x's
// columns, w, dy) rounded to bf16, fp32 accumulation and fp32 outputs;
// the bias and its gradient fp32. Needs AVX512_BF16.
void conv2d_mixed_bf16(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y);
void conv2d_backward_mixed_bf16(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                                float* dx, float* dw, float* dbias);

namespace ref {
void conv2d(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y);
void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* dbias);
}  // namespace ref

}  // namespace px::kernels
