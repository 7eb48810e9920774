// float32 <-> bf16 over arrays. The AVX512-BF16 path converts 32 floats per
// instruction (VCVTNE2PS2BF16, round to nearest even); the functions carry
// their own target attribute and are only called after the runtime check,
// so the library still runs on CPUs without the extension.
#include "kernels/bf16.h"

#include <immintrin.h>

#include "core/thread_pool.h"
#include "kernels/cpu_features.h"
#include "kernels/grain.h"

namespace px::kernels {
namespace {

#define PX_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

PX_AVX512_BF16 void to_bf16_avx512(int64_t n, const float* x, bf16* y) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(x + i), hi = _mm512_loadu_ps(x + i + 16);
    // The second operand fills the low 16 lanes of the result.
    const __m512bh packed = _mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512(reinterpret_cast<__m512i*>(y + i), reinterpret_cast<const __m512i&>(packed));
  }
  for (; i < n; i += 16) {  // the last 1..31 values, 16 lanes under a mask
    const int64_t left = n - i < 16 ? n - i : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1u);
    const __m256bh packed = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + i));
    _mm256_mask_storeu_epi16(y + i, mask, reinterpret_cast<const __m256i&>(packed));
  }
}

PX_AVX512_BF16 void to_float_avx512(int64_t n, const bf16* x, float* y) {
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t left = n - i < 16 ? n - i : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1u);
    // The maskz forms: GCC 12 warns on the plain ones' undefined start value.
    const __m512i wide = _mm512_maskz_cvtepu16_epi32(mask, _mm256_maskz_loadu_epi16(mask, x + i));
    _mm512_mask_storeu_ps(y + i, mask, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(mask, wide, 16)));
  }
}

#undef PX_AVX512_BF16

}  // namespace

// Memory-bound: large arrays are split across the pool in chunks of
// detail::kCheapGrain elements.
void to_bf16(int64_t n, const float* x, bf16* y) {
  const auto convert = cpu_has_avx512_bf16() ? to_bf16_avx512 : ref::to_bf16;
  px::parallel_for(0, n, detail::kCheapGrain, [&](int64_t lo, int64_t hi) { convert(hi - lo, x + lo, y + lo); });
}

void to_float(int64_t n, const bf16* x, float* y) {
  const auto convert = cpu_has_avx512_bf16() ? to_float_avx512 : ref::to_float;
  px::parallel_for(0, n, detail::kCheapGrain, [&](int64_t lo, int64_t hi) { convert(hi - lo, x + lo, y + lo); });
}

namespace ref {

void to_bf16(int64_t n, const float* x, bf16* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = kernels::to_bf16(x[i]);
}

void to_float(int64_t n, const bf16* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = kernels::to_float(x[i]);
}

}  // namespace ref
}  // namespace px::kernels
