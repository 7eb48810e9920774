// bfloat16 storage: the upper 16 bits of an IEEE float32 (sign, the same
// 8-bit exponent, 7 of the 23 mantissa bits). GEMM inputs are stored in it
// and widened back exactly; arithmetic stays in float32.
//
// Narrowing follows the hardware instruction (VCVTNE2PS2BF16) bit for bit,
// so the vector path and the scalar reference agree on every input:
//   - finite values round to nearest, ties to even (may overflow to ±inf);
//   - float32 denormals become a zero of the same sign (the instruction
//     flushes them; a bf16 denormal would be below 2^-126 anyway);
//   - ±inf stays ±inf; a NaN stays a NaN of the same sign, made quiet
//     (mantissa bit 6 set), keeping the upper 7 bits of its payload.
#pragma once

#include <bit>
#include <cstdint>

namespace px::kernels {

struct bf16 {
  uint16_t bits = 0;
  friend bool operator==(bf16, bf16) = default;
};

// Exact: every bf16 is a float32.
inline float to_float(bf16 value) { return std::bit_cast<float>(uint32_t{value.bits} << 16); }

// The rounding described above, on one value.
inline bf16 to_bf16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t exponent = x & 0x7f800000u, mantissa = x & 0x007fffffu;
  if (exponent == 0) return {static_cast<uint16_t>((x >> 16) & 0x8000u)};  // zero, denormal
  if (exponent == 0x7f800000u && mantissa != 0)                            // NaN
    return {static_cast<uint16_t>((x >> 16) | 0x0040u)};
  const uint32_t rounding_bias = 0x7fffu + ((x >> 16) & 1u);  // ties go to the even neighbour
  return {static_cast<uint16_t>((x + rounding_bias) >> 16)};  // inf + bias stays inf
}

// n values at a time; AVX512-BF16 where the CPU has it, else the scalar
// loop; large arrays across the thread pool.
void to_bf16(int64_t n, const float* x, bf16* y);
void to_float(int64_t n, const bf16* x, float* y);

namespace ref {
void to_bf16(int64_t n, const float* x, bf16* y);
void to_float(int64_t n, const bf16* x, float* y);
}  // namespace ref

}  // namespace px::kernels
