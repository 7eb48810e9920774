// Row softmax over a [rows, cols] matrix, numerically stable (max-subtracted).
#pragma once

#include <cstdint>

namespace px::kernels {

void softmax(int64_t rows, int64_t cols, const float* x, float* y);
// dx = y * (dy - sum(dy * y)) per row.
void softmax_backward(int64_t rows, int64_t cols, const float* y, const float* dy, float* dx);

namespace ref {
void softmax(int64_t rows, int64_t cols, const float* x, float* y);
void softmax_backward(int64_t rows, int64_t cols, const float* y, const float* dy, float* dx);
}  // namespace ref

}  // namespace px::kernels
