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
  std::string str() const;  // "F32[2,3]"
};

}  // namespace px
