// LayerNorm over the last dim of a [rows, C] matrix, eps inside the sqrt
// (torch.nn.LayerNorm semantics, biased variance).
//   y = (x - mean) * rstd * gamma + beta;  saves mean[rows], rstd[rows].
#pragma once

#include <cstdint>

namespace px::kernels {

void layernorm(int64_t rows, int64_t C, float eps, const float* x, const float* gamma,
               const float* beta, float* y, float* mean, float* rstd);
// dx overwritten; dgamma, dbeta accumulated (+=).
void layernorm_backward(int64_t rows, int64_t C, const float* x, const float* gamma,
                        const float* mean, const float* rstd, const float* dy, float* dx,
                        float* dgamma, float* dbeta);

namespace ref {
void layernorm(int64_t rows, int64_t C, float eps, const float* x, const float* gamma,
               const float* beta, float* y, float* mean, float* rstd);
void layernorm_backward(int64_t rows, int64_t C, const float* x, const float* gamma,
                        const float* mean, const float* rstd, const float* dy, float* dx,
                        float* dgamma, float* dbeta);
}  // namespace ref

}  // namespace px::kernels
