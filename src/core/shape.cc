#include "core/shape.h"

#include "core/error.h"

namespace px {

int Shape::axis(int axis) const {
  int r = rank();
  if (axis < -r || axis >= r) fail("axis {} out of range for shape {} (rank {})", axis, str(), r);
  return axis < 0 ? axis + r : axis;
}

int64_t Shape::operator[](int a) const { return dims_[axis(a)]; }
int64_t& Shape::at(int a) { return dims_[axis(a)]; }

int64_t Shape::numel() const { return numel(0, rank()); }

int64_t Shape::numel(int begin, int end) const {
  // Dims may come from a file (IDX, safetensors): a zero dim makes the
  // count 0 whatever the others, and a count past int64 is refused by name
  // rather than wrapped.
  for (int i = begin; i < end; ++i)
    if (dims_[i] == 0) return 0;
  int64_t n = 1;
  for (int i = begin; i < end; ++i)
    if (__builtin_mul_overflow(n, dims_[i], &n)) fail("shape {} has more than 2^63 elements", str());
  return n;
}

std::string Shape::str() const { return fmt::format("[{}]", fmt::join(dims_, ",")); }

}  // namespace px
