// The static type of a graph value: shape and element type.
#pragma once

#include <string>

#include "core/dtype.h"
#include "core/shape.h"

namespace px {

struct TensorSpec {
  Shape shape;
  DType dtype = DType::f32;
  bool operator==(const TensorSpec&) const = default;
  int64_t bytes() const { return shape.numel() * static_cast<int64_t>(dtype_size(dtype)); }
  std::string str() const;  // "F32[2,3]"
};

}  // namespace px
