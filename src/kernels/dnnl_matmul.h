// Internal to src/kernels: the thin layer between kernels and oneDNN, as
// blas.h is for OpenBLAS.
//  - matmul_bf16(): one single-threaded bf16 x bf16 -> fp32 product through
//    oneDNN's matmul primitive, built once per shape and reused (the build
//    JIT-compiles a kernel: ~ms; a cached execution costs a few us).
//  - matmul_bf16_bias(): the same product plus a bias row, added in the
//    kernel's epilogue, its output fp32 or rounded to bf16 there.
//  - matmul_bf16_implementation(): the kernel oneDNN chose for a shape
//    ("brg:avx512_core_amx", "brg:avx512_core_bf16", ...), for benchmarks.
// Debian's oneDNN runs on OpenMP; every call here runs with one OpenMP
// thread, whichever thread calls, so the px pool alone decides the
// parallelism (see gemm_bf16.cc).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/bf16.h"

namespace px::kernels::detail {

// C[M,N] = alpha * op(A) * op(B) + beta * C, gemm.h's conventions; M, N, K >= 1.
void matmul_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
                 int64_t ldc);

// C[M,N] = op(A) * op(B) + bias[N] (bias null: none), C stored fp32, or bf16
// when `c_in_bf16` (the fp32 result rounded to nearest even as it is
// stored); M, N, K >= 1.
void matmul_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                      const bf16* B, int64_t ldb, const float* bias, void* C, int64_t ldc, bool c_in_bf16);

std::string matmul_bf16_implementation(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K);

}  // namespace px::kernels::detail
