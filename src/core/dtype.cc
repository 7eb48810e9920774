#include "core/dtype.h"

#include "core/error.h"

namespace px {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  PX_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  PX_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
}

DType dtype_from_name(std::string_view name) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    if (dtype_name(d) == name) return d;
  fail("unknown dtype '{}': expected one of F32, F16, BF16, I32, I64, U8", name);
}

}  // namespace px
