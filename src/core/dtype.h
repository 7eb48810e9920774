// Element types of tensors. float32 is the compute type; f16/bf16 are storage
// and wire formats (compression); i32/i64 hold token ids and labels; u8 masks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace px {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8 };

size_t dtype_size(DType dtype);
// Names as in safetensors: "F32", "F16", "BF16", "I32", "I64", "U8".
std::string_view dtype_name(DType dtype);
// Inverse of dtype_name; throws px::Error naming the unknown string.
DType dtype_from_name(std::string_view name);

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

}  // namespace px
