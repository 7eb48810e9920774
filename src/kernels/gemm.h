// General matrix multiply on row-major float32 buffers (BLAS convention):
//   C[M,N] = alpha * op(A) * op(B) + beta * C
// op(A) is [M,K] (A stored [M,K], lda >= K) or its transpose (A stored [K,M]).
// op(B) is [K,N] (B stored [K,N]) or its transpose (B stored [N,K]).
#pragma once

#include <cstdint>

namespace px::kernels {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);

// `batch` independent GEMMs whose operands start stride_* floats apart.
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                  int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                  int64_t stride_c);

namespace ref {
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);
}  // namespace ref

}  // namespace px::kernels
