// bf16 products on AMX tiles (Sapphire Rapids and later), for the
// attention tiles' bf16 path (kernels/attention_amx.cc): small products
// (128 x 256 x 64) whose oneDNN calls would cost more than their
// arithmetic. Measured 2026-11-29, one thread: 128 x 256 x 64 at 812
// GFLOP/s, 128 x 64 x 256 at 1080 (sgemm on the same shapes 142, 132).
// Layouts: A (M, K) bf16 row-major, lda elements apart; B VNNI-packed:
// Bp (K/2, N) of bf16 pairs (B[2r][n], B[2r+1][n]) as uint32, ldb pairs
// apart; C (M, N) fp32, ldc apart. M and N multiples of 16, K of 32 (the
// caller pads with zeros).
#pragma once

#include <cstdint>

#include "kernels/bf16.h"

namespace px::kernels {

// The CPU has AMX-BF16 and the kernel let this process use the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool amx_bf16_ready();

// C = A·B, or C += A·B when `accumulate`.
void amx_gemm_bf16(int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const uint32_t* Bp, int64_t ldb,
                   float* C, int64_t ldc, bool accumulate);

// Bp from B (K, N) bf16 row-major (ldb_in elements apart): pairs of rows
// interleaved. K even.
void vnni_pack(int64_t K, int64_t N, const bf16* B, int64_t ldb_in, uint32_t* Bp, int64_t ldb);

}  // namespace px::kernels
