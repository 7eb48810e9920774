// Shape: the dimensions of a dense row-major tensor, outermost first.
// Negative indices count from the end, as in numpy.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace px {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  // dims()[axis] with negative axes allowed; checks the range.
  int64_t operator[](int axis) const;
  int64_t& at(int axis);
  // Normalizes a possibly negative axis into [0, rank); throws px::Error otherwise.
  int axis(int axis) const;
  int64_t numel() const;
  // Product of dims in [begin, end).
  int64_t numel(int begin, int end) const;
  const std::vector<int64_t>& dims() const { return dims_; }
  std::string str() const;  // "[2,3,4]"

  bool operator==(const Shape& other) const = default;

 private:
  std::vector<int64_t> dims_;
};

}  // namespace px

#include <fmt/format.h>
template <>
struct fmt::formatter<px::Shape> : fmt::formatter<std::string> {
  auto format(const px::Shape& s, format_context& ctx) const {
    return fmt::formatter<std::string>::format(s.str(), ctx);
  }
};
