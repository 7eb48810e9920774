// General matrix multiply with bf16 inputs, fp32 accumulation, fp32 output
// (mixed precision's GEMM; kernels/gemm.h's conventions otherwise):
//   C[M,N] = alpha * op(A) * op(B) + beta * C
// op(A) is [M,K] (A stored [M,K], lda >= K) or its transpose (A stored [K,M]).
// op(B) is [K,N] (B stored [K,N]) or its transpose (B stored [N,K]).
// Each product of two bf16 values is exact in fp32; only the sums round.
// Needs AVX512_BF16 (kernels/cpu_features.h): without it, throws px::Error.
#pragma once

#include <cstdint>

#include "kernels/bf16.h"

namespace px::kernels {

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
               int64_t ldc);

// One operand of a mixed-precision GEMM, stored [rows, ld]: fp32 values,
// rounded to bf16 on the way in, or values already stored in bf16 (a graph
// value the lowering keeps in bf16 because only bf16 GEMMs read it,
// graph/precision.h). Exactly one of the two pointers is set.
struct Bf16Operand {
  const float* f32 = nullptr;
  const bf16* rounded = nullptr;
  int64_t ld = 0;
};

// The product gemm_bf16 computes, for operands in either storage: fp32
// ones are first rounded to bf16 (to nearest even, kernels/bf16.h) into
// per-thread scratch that calls reuse. What a graph op with precision bf16
// runs; relative to fp32 each product carries up to about 2^-7 of extra
// error (two roundings of at most 2^-8, bf16's unit roundoff), the sums the
// same fp32 rounding as gemm. An operand stored in bf16 gives bit for bit
// the result of its fp32 original, rounded here.
void gemm_mixed_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, Bf16Operand A,
                     Bf16Operand B, float beta, float* C, int64_t ldc);

// Where a GEMM with an epilogue stores C, [M, ld]: fp32, or rounded to bf16
// (to nearest even) as it is stored. Exactly one of the two pointers is set.
struct Bf16Output {
  float* f32 = nullptr;
  bf16* rounded = nullptr;
  int64_t ld = 0;
};

// C = op(A) · op(B) + bias: gemm_mixed_bf16's product (alpha 1, beta 0)
// with a bias row (N fp32 values, one a column; null for none) added to the
// fp32 result in oneDNN's epilogue, and C stored fp32 or in bf16 there: a
// linear layer's output in one pass over C instead of three (GEMM, bias
// add, rounding). Per element the GEMM's fp32 sum, then + bias in fp32,
// then the one rounding to bf16 if so stored.
void gemm_bias_mixed_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Bf16Operand A,
                          Bf16Operand B, const float* bias, Bf16Output C);

// gemm_mixed_bf16 for `batch` products: product i reads A and B advanced
// by i * stride_a and i * stride_b elements (in their storage) and writes C
// advanced by i * stride_c. Many small products run one per pool thread,
// few large ones each across the pool; every product is gemm_mixed_bf16's.
void gemm_batched_mixed_bf16(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                             float alpha, Bf16Operand A, int64_t stride_a, Bf16Operand B, int64_t stride_b,
                             float beta, float* C, int64_t ldc, int64_t stride_c);

namespace ref {
// The same product summed in double, on any CPU.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
               int64_t ldc);

// gemm_bias_mixed_bf16 the plain way: the operands rounded (ref::to_bf16),
// this reference GEMM, + bias in fp32, then C rounded if stored in bf16.
void gemm_bias_mixed_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Bf16Operand A,
                          Bf16Operand B, const float* bias, Bf16Output C);
}  // namespace ref

}  // namespace px::kernels
