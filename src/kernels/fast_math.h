// Internal to src/kernels: exp and lane reductions written as straight-line
// float code so that g++ -O3 -march=native vectorizes loops that use them
// (libm's expf is a scalar call). Relative error of exp_approx is ~2 ulp on
// [-87, 88]; inputs below -87.3 return 0 and above 88.7 saturate.
#pragma once

#include <bit>
#include <cstdint>

namespace px::kernels::detail {

// The core of exp_approx on a clamped x, for a float or a vector of them
// (V): x = n ln2 + r, |r| <= ln2/2 (Cody-Waite split of ln2), rounded to
// nearest by adding 1.5 * 2^23 (floorf would block vectorization), so the
// integer n sits in the low mantissa bits of `shifted`; returns the Cephes
// expf polynomial, e^r.
template <class V>
inline V exp_of_remainder(V xc, V& shifted) {
  const float kShift = 12582912.0f;
  shifted = xc * 1.44269504088896341f + kShift;
  const V n = shifted - kShift;
  V r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

inline float exp_approx(float x) {
  const float lo = -87.33654f, hi = 88.72283f;
  float xc = x < lo ? lo : (x > hi ? hi : x);
  float shifted;
  const float p = exp_of_remainder(xc, shifted);
  // 2^n via the exponent bits; n in [-126, 128], the top case split in two.
  int32_t ni = std::bit_cast<int32_t>(shifted) - 0x4B400000;
  int32_t n1 = ni >> 1;
  int32_t n2 = ni - n1;
  float s1 = std::bit_cast<float>(static_cast<int32_t>((n1 + 127) << 23));
  float s2 = std::bit_cast<float>(static_cast<int32_t>((n2 + 127) << 23));
  float y = p * s1 * s2;
  return x < lo ? 0.0f : y;
}

// Reductions use GCC/Clang vector extensions: 16 float lanes, which the
// compiler maps to one AVX-512 register or two AVX2 ones. (Plain loops with
// lane arrays vectorize only sometimes; reductions over a scalar never do
// without -ffast-math.) The lane order is fixed, so results depend only on
// the data.
using f32x16 = float __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

inline f32x16 load16(const float* p) {
  f32x16 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

inline void store16(float* p, f32x16 v) { __builtin_memcpy(p, &v, sizeof v); }

using i32x16 = int32_t __attribute__((vector_size(64)));
using u16x16 = uint16_t __attribute__((vector_size(32)));

// 16 bf16 values (their bits) widened exactly to float.
inline f32x16 load16_bf16(const void* p) {
  u16x16 h;
  __builtin_memcpy(&h, p, sizeof h);
  return reinterpret_cast<f32x16>(__builtin_convertvector(h, i32x16) << 16);
}

// exp_approx on 16 lanes at once, step for step: loops whose body the
// compiler does not vectorize well at full width (GELU's) call it.
inline f32x16 exp_approx(f32x16 x) {
  const f32x16 zero = {};
  const f32x16 lo = zero - 87.33654f, hi = zero + 88.72283f;
  f32x16 xc = x < lo ? lo : (x > hi ? hi : x);
  f32x16 shifted;
  const f32x16 p = exp_of_remainder(xc, shifted);
  i32x16 ni = reinterpret_cast<i32x16>(shifted) - 0x4B400000;
  i32x16 n1 = ni >> 1;
  i32x16 n2 = ni - n1;
  f32x16 s1 = reinterpret_cast<f32x16>((n1 + 127) << 23);
  f32x16 s2 = reinterpret_cast<f32x16>((n2 + 127) << 23);
  f32x16 y = p * s1 * s2;
  return x < lo ? zero : y;
}

inline float hsum(f32x16 v) {
  float s = 0.0f;
  for (int j = 0; j < kLanes; ++j) s += v[j];
  return s;
}

inline float sum(const float* __restrict x, int64_t n) {
  f32x16 acc = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += load16(x + i);
  float s = hsum(acc);
  for (; i < n; ++i) s += x[i];
  return s;
}

inline float dot(const float* __restrict x, const float* __restrict y, int64_t n) {
  f32x16 acc = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += load16(x + i) * load16(y + i);
  float s = hsum(acc);
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

inline float max(const float* __restrict x, int64_t n) {
  float m = -__builtin_inff();
  int64_t i = 0;
  if (n >= kLanes) {
    f32x16 acc = load16(x);
    for (i = kLanes; i + kLanes <= n; i += kLanes) {
      f32x16 v = load16(x + i);
      acc = acc > v ? acc : v;
    }
    for (int j = 0; j < kLanes; ++j) m = m > acc[j] ? m : acc[j];
  }
  for (; i < n; ++i) m = m > x[i] ? m : x[i];
  return m;
}

// y[i] = exp(x[i] - shift); returns sum of y. x may equal y. One pass,
// summed in sum()'s order (16 lanes, then the tail): the same result as
// the exps followed by sum(y, n).
inline float exp_shifted_sum(const float* x, float* y, int64_t n, float shift) {
  f32x16 acc = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const f32x16 e = exp_approx(load16(x + i) - shift);
    store16(y + i, e);
    acc += e;
  }
  float s = hsum(acc);
  for (; i < n; ++i) s += y[i] = exp_approx(x[i] - shift);
  return s;
}

}  // namespace px::kernels::detail
