#include "comm/reduction.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.h"

namespace px::comm {
namespace {

// Elements per block of reduce_many: the partial result lives on the stack
// (4 KiB), so dst may alias a source and the sources stream once each.
constexpr int64_t kBlock = 1024;

struct F32 {
  using Raw = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
struct F16 {
  using Raw = uint16_t;
  static float load(uint16_t v) { return f16_to_f32(v); }
  static uint16_t store(float v) { return f32_to_f16(v); }
};
struct BF16 {
  using Raw = uint16_t;
  static float load(uint16_t v) { return bf16_to_f32(v); }
  static uint16_t store(float v) { return f32_to_bf16(v); }
};

template <Reduction op>
inline float combine(float a, float b) {
  if constexpr (op == Reduction::max) return a > b ? a : b;
  if constexpr (op == Reduction::min) return a < b ? a : b;
  return a + b;  // sum and avg
}

template <typename T, Reduction op>
void reduce_into_typed(void* dst_raw, const void* src_raw, int64_t count) {
  auto* __restrict dst = static_cast<typename T::Raw*>(dst_raw);
  const auto* __restrict src = static_cast<const typename T::Raw*>(src_raw);
  for (int64_t i = 0; i < count; ++i)
    dst[i] = T::store(combine<op>(T::load(dst[i]), T::load(src[i])));
}

template <typename T, Reduction op>
void reduce_many_typed(void* dst_raw, const void* const* sources, int source_count,
                       int64_t count, float factor) {
  auto* dst = static_cast<typename T::Raw*>(dst_raw);
  alignas(64) float partial[kBlock];
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    int64_t n = std::min(kBlock, count - begin);
    const auto* first = static_cast<const typename T::Raw*>(sources[0]) + begin;
    for (int64_t i = 0; i < n; ++i) partial[i] = T::load(first[i]);
    for (int s = 1; s < source_count; ++s) {
      const auto* __restrict src = static_cast<const typename T::Raw*>(sources[s]) + begin;
      for (int64_t i = 0; i < n; ++i) partial[i] = combine<op>(partial[i], T::load(src[i]));
    }
    if (factor != 1.0f)
      for (int64_t i = 0; i < n; ++i) partial[i] *= factor;
    for (int64_t i = 0; i < n; ++i) dst[begin + i] = T::store(partial[i]);
  }
}

template <template <typename, Reduction> class Kernel, typename... Args>
void dispatch(DType dtype, Reduction op, Args... args) {
  auto by_op = [&]<typename T>() {
    switch (op) {
      case Reduction::sum:
      case Reduction::avg: Kernel<T, Reduction::sum>::run(args...); return;
      case Reduction::max: Kernel<T, Reduction::max>::run(args...); return;
      case Reduction::min: Kernel<T, Reduction::min>::run(args...); return;
    }
  };
  switch (dtype) {
    case DType::f32: by_op.template operator()<F32>(); return;
    case DType::f16: by_op.template operator()<F16>(); return;
    case DType::bf16: by_op.template operator()<BF16>(); return;
    default: fail("reduction over dtype {} is not supported; expected F32, F16 or BF16",
                  dtype_name(dtype));
  }
}

template <typename T, Reduction op>
struct ReduceInto {
  static void run(void* dst, const void* src, int64_t count) {
    reduce_into_typed<T, op>(dst, src, count);
  }
};
template <typename T, Reduction op>
struct ReduceMany {
  static void run(void* dst, const void* const* sources, int source_count, int64_t count,
                  float factor) {
    reduce_many_typed<T, op>(dst, sources, source_count, count, factor);
  }
};

}  // namespace

std::string_view reduction_name(Reduction op) {
  switch (op) {
    case Reduction::sum: return "sum";
    case Reduction::avg: return "avg";
    case Reduction::max: return "max";
    case Reduction::min: return "min";
  }
  return "?";
}

Reduction reduction_from_name(std::string_view name) {
  for (Reduction op : {Reduction::sum, Reduction::avg, Reduction::max, Reduction::min})
    if (reduction_name(op) == name) return op;
  fail("unknown reduction '{}'; expected sum, avg, max or min", name);
}

void reduce_into(void* dst, const void* src, int64_t count, DType dtype, Reduction op) {
  if (count == 0) return;
  dispatch<ReduceInto>(dtype, op, dst, src, count);
}

void reduce_many(void* dst, const void* const* sources, int source_count, int64_t count,
                 DType dtype, Reduction op, float factor) {
  if (count == 0) return;
  PX_CHECK_GE(source_count, 1);
  dispatch<ReduceMany>(dtype, op, dst, sources, source_count, count, factor);
}

void scale(void* data, int64_t count, DType dtype, float factor) {
  if (count == 0 || factor == 1.0f) return;
  const void* sources[1] = {data};
  dispatch<ReduceMany>(dtype, Reduction::sum, data, sources, 1, count, factor);
}

void check_reducible(DType dtype, std::string_view collective) {
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    fail("{}: dtype {} cannot be reduced; expected F32, F16 or BF16", collective,
         dtype_name(dtype));
}

float f16_to_f32(uint16_t half) {
  uint32_t sign = (half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1f;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int shift = 0;
      while (!(mantissa & 0x400u)) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      bits = sign | ((127 - 15 + 1 - shift) << 23) | (mantissa << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float value) {
  // Round to nearest even, with overflow to inf and gradual underflow.
  uint32_t bits = std::bit_cast<uint32_t>(value);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    float magnitude = std::bit_cast<float>(abs);
    // 2^-24 is the half subnormal unit; adding 0.5 (2^-1) rounds to it exactly.
    float shifted = magnitude + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mantissa_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float bf16_to_f32(uint16_t value) { return std::bit_cast<float>(static_cast<uint32_t>(value) << 16); }

uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace px::comm
