// 2-D max pooling, NCHW, window k, stride k (non-overlapping, floor), as
// torch.nn.MaxPool2d(k). argmax (N, C, Ho, Wo) holds the flat index h*W+w of
// each window's max within its (n, c) plane, saved for backward.
#pragma once

#include <cstdint>

namespace px::kernels {

void maxpool2d(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, const float* x, float* y,
               int32_t* argmax);
// dx overwritten.
void maxpool2d_backward(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k,
                        const int32_t* argmax, const float* dy, float* dx);

namespace ref {
void maxpool2d(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, const float* x, float* y,
               int32_t* argmax);
}  // namespace ref

}  // namespace px::kernels
