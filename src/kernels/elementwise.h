// Pointwise kernels over n elements, and row-broadcast bias kernels over a
// [rows, cols] matrix. GELU is GPT-2's tanh approximation.
#pragma once

#include <cstdint>

namespace px::kernels {

void add(int64_t n, const float* a, const float* b, float* out);          // out = a + b
void add_inplace(int64_t n, const float* a, float* out);                  // out += a
void scale(int64_t n, float alpha, const float* x, float* out);           // out = alpha * x
void mul(int64_t n, const float* a, const float* b, float* out);          // out = a * b
void add_bias(int64_t rows, int64_t cols, const float* bias, float* x);    // x[r,c] += bias[c]
void bias_grad(int64_t rows, int64_t cols, const float* dy, float* dbias); // dbias[c] += sum_r dy[r,c]
void relu(int64_t n, const float* x, float* y);
void relu_backward(int64_t n, const float* y, const float* dy, float* dx);  // dx = dy * (y > 0)
void gelu(int64_t n, const float* x, float* y);
void gelu_backward(int64_t n, const float* x, const float* dy, float* dx);
float sum_squares(int64_t n, const float* x);  // in double internally

namespace ref {
void add_bias(int64_t rows, int64_t cols, const float* bias, float* x);
void bias_grad(int64_t rows, int64_t cols, const float* dy, float* dbias);
void gelu(int64_t n, const float* x, float* y);
void gelu_backward(int64_t n, const float* x, const float* dy, float* dx);
float sum_squares(int64_t n, const float* x);
}  // namespace ref

}  // namespace px::kernels
