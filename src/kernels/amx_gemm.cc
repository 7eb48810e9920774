// AMX bf16 micro-kernel (kernels/amx_gemm.h): C in 32 x 32 blocks held in
// four 16 x 16 fp32 tiles (tmm0-3), A's two 16-row strips (tmm4-5) and B's
// two 16-column strips (tmm6-7) loaded per 32-deep step of K.
#include "kernels/amx_gemm.h"

// GCC 12 warns that the intrinsics' undefined start values are
// uninitialized where they are inlined into target("avx512...") functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"
#include "kernels/cpu_features.h"

namespace px::kernels {
namespace {

constexpr long kArchReqXcompPerm = 0x1023;
constexpr long kXfeatureXtiledata = 18;

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

bool cpu_has_amx_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(0));
  return (edx & (1u << 22)) != 0 && (edx & (1u << 24)) != 0;  // AMX-BF16, AMX-TILE
}

// Eight tiles of 16 rows x 64 bytes.
__attribute__((target("amx-tile,amx-bf16"))) void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

// One 32 x 32 block of C (rows m0, columns n0), `both_m` / `both_n`: its
// second 16-row / 16-column half exists.
__attribute__((target("amx-tile,amx-bf16"))) void block(int64_t K, const bf16* A, int64_t lda, const uint32_t* Bp,
                                                          int64_t ldb, float* C, int64_t ldc, bool accumulate,
                                                          bool both_m, bool both_n) {
  const int64_t a_stride = lda * 2, b_stride = ldb * 4, c_stride = ldc * 4;
  if (accumulate) {
    _tile_loadd(0, C, c_stride);
    if (both_n) _tile_loadd(1, C + 16, c_stride);
    if (both_m) _tile_loadd(2, C + 16 * ldc, c_stride);
    if (both_m && both_n) _tile_loadd(3, C + 16 * ldc + 16, c_stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t k = 0; k < K; k += 32) {
    _tile_loadd(4, A + k, a_stride);
    _tile_loadd(6, Bp + (k / 2) * ldb, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    if (both_n) {
      _tile_loadd(7, Bp + (k / 2) * ldb + 16, b_stride);
      _tile_dpbf16ps(1, 4, 7);
    }
    if (both_m) {
      _tile_loadd(5, A + 16 * lda + k, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      if (both_n) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, C, c_stride);
  if (both_n) _tile_stored(1, C + 16, c_stride);
  if (both_m) _tile_stored(2, C + 16 * ldc, c_stride);
  if (both_m && both_n) _tile_stored(3, C + 16 * ldc + 16, c_stride);
}

__attribute__((target("amx-tile,amx-bf16"))) void release_tiles() { _tile_release(); }

}  // namespace

bool amx_bf16_ready() {
  static const bool ready = cpu_has_amx_bf16() && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return ready;
}

void amx_gemm_bf16(int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const uint32_t* Bp, int64_t ldb,
                   float* C, int64_t ldc, bool accumulate) {
  // The tile data is the process's only once the kernel granted it.
  if (!amx_bf16_ready()) throw Error("amx_gemm_bf16: this CPU has no AMX-BF16, or the kernel refused its tile data");
  configure_tiles();
  for (int64_t m0 = 0; m0 < M; m0 += 32)
    for (int64_t n0 = 0; n0 < N; n0 += 32)
      block(K, A + m0 * lda, lda, Bp + n0, ldb, C + m0 * ldc + n0, ldc, accumulate, m0 + 16 < M, n0 + 16 < N);
  release_tiles();
}

// Sixteen pairs at a time: each row's 16 bf16 widened to 32-bit lanes,
// the odd row's shifted into the high halves.
__attribute__((target("avx512f,avx512bw"))) void vnni_pack(int64_t K, int64_t N, const bf16* B, int64_t ldb_in,
                                                             uint32_t* Bp, int64_t ldb) {
  for (int64_t r = 0; r < K / 2; ++r) {
    const bf16* even = B + 2 * r * ldb_in;
    const bf16* odd = even + ldb_in;
    int64_t n = 0;
    for (; n + 16 <= N; n += 16) {
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(even + n)));
      const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(odd + n)));
      _mm512_storeu_si512(Bp + r * ldb + n, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
    for (; n < N; ++n) Bp[r * ldb + n] = uint32_t{even[n].bits} | (uint32_t{odd[n].bits} << 16);
  }
}

}  // namespace px::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
