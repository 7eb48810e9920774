// Pointwise kernels over n elements, and row-broadcast bias kernels over a
// [rows, cols] matrix. GELU is GPT-2's tanh approximation.
#pragma once

#include <cstdint>

#include "kernels/bf16.h"

namespace px::kernels {

void add(int64_t n, const float* a, const float* b, float* out);          // out = a + b
void add_inplace(int64_t n, const float* a, float* out);                  // out += a
void scale(int64_t n, float alpha, const float* x, float* out);           // out = alpha * x
void mul(int64_t n, const float* a, const float* b, float* out);          // out = a * b
// y[r,c] = x[r,c] + bias[c] in one pass; y may be x.
void add_bias(int64_t rows, int64_t cols, const float* x, const float* bias, float* y);
// The same with y stored in bf16, rounded as to_bf16 rounds (x, bias fp32).
void add_bias(int64_t rows, int64_t cols, const float* x, const float* bias, bf16* y);
void bias_grad(int64_t rows, int64_t cols, const float* dy, float* dbias); // dbias[c] += sum_r dy[r,c]
void relu(int64_t n, const float* x, float* y);
void relu_backward(int64_t n, const float* y, const float* dy, float* dx);  // dx = dy * (y > 0)
void gelu(int64_t n, const float* x, float* y);
void gelu_backward(int64_t n, const float* x, const float* dy, float* dx);
// The same with x stored in bf16 (a bf16 node's stored input), widened as it
// is read: one pass, no fp32 copy of x. Results equal the fp32 kernels' on
// the widened values.
void gelu(int64_t n, const bf16* x, float* y);
void gelu(int64_t n, const bf16* x, bf16* y);  // y rounded as to_bf16 rounds
void gelu_backward(int64_t n, const bf16* x, const float* dy, float* dx);
// gelu_backward over a [rows, cols] matrix that also sums each column of
// the fp32 dx into dbias (written, not added to): the gradient of a bf16
// linear's output, which its two GEMMs read in bf16 and its bias gradient
// sums, in one pass. dx stored in bf16 is rounded as to_bf16 rounds, after
// the sum took its fp32 value. Bit for bit gelu_backward, then bias_grad
// into zeros (columns summed over the rows in order), then to_bf16.
void gelu_backward_bias(int64_t rows, int64_t cols, const float* x, const float* dy, float* dx, float* dbias);
void gelu_backward_bias(int64_t rows, int64_t cols, const bf16* x, const float* dy, float* dx, float* dbias);
void gelu_backward_bias(int64_t rows, int64_t cols, const bf16* x, const float* dy, bf16* dx, float* dbias);
float sum_squares(int64_t n, const float* x);  // in double internally

namespace ref {
void add_bias(int64_t rows, int64_t cols, const float* x, const float* bias, float* y);
// The same with y stored in bf16, rounded as to_bf16 rounds (x, bias fp32).
void add_bias(int64_t rows, int64_t cols, const float* x, const float* bias, bf16* y);
void bias_grad(int64_t rows, int64_t cols, const float* dy, float* dbias);
void gelu(int64_t n, const float* x, float* y);
void gelu_backward(int64_t n, const float* x, const float* dy, float* dx);
// ref::gelu_backward, then ref::bias_grad into zeros (x and dx fp32).
void gelu_backward_bias(int64_t rows, int64_t cols, const float* x, const float* dy, float* dx, float* dbias);
float sum_squares(int64_t n, const float* x);
}  // namespace ref

}  // namespace px::kernels
