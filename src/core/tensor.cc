#include "core/tensor.h"

#include <cstring>

#include "core/memory.h"

namespace px {

Storage::Storage(size_t bytes) : data_(tracked_alloc(bytes)), bytes_(bytes) {}
Storage::~Storage() { tracked_free(data_, bytes_); }

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  for (int64_t d : shape.dims())
    if (d < 0) fail("cannot allocate tensor of shape {}: negative dimension", shape);
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.zero();
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  PX_CHECK_EQ(static_cast<int64_t>(values.size()), shape.numel());
  Tensor t = empty(shape);
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<int32_t>& values) {
  PX_CHECK_EQ(static_cast<int64_t>(values.size()), shape.numel());
  Tensor t = empty(shape, DType::i32);
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

std::vector<float> Tensor::to_vector() const {
  const float* p = f32();
  return std::vector<float>(p, p + numel());
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_);
  if (nbytes() > 0) std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (shape.numel() != numel())
    fail("cannot reshape tensor of shape {} ({} elements) to {} ({} elements)", shape_, numel(),
         shape, shape.numel());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  PX_CHECK(rank() >= 1);
  PX_CHECK(0 <= begin && begin <= end && end <= shape_[0], "rows [{}, {}) of {}", begin, end, shape_);
  Tensor t = *this;
  int64_t row = shape_.numel(1, rank());
  t.offset_bytes_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_.at(0) = end - begin;
  return t;
}

void Tensor::fill(float value) {
  float* p = f32();
  for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = value;
}

void Tensor::zero() {
  if (nbytes() > 0) std::memset(raw(), 0, nbytes());
}

void Tensor::copy_from(const Tensor& src) {
  PX_CHECK_EQ(src.numel(), numel());
  PX_CHECK(src.dtype() == dtype_, "dtype {} vs {}", dtype_name(src.dtype()), dtype_name(dtype_));
  if (nbytes() > 0) std::memmove(raw(), src.raw(), nbytes());
}

void Tensor::check_type(DType requested) const {
  PX_CHECK(defined(), "access to an undefined tensor");
  PX_CHECK(requested == dtype_, "tensor of dtype {} accessed as {}", dtype_name(dtype_),
           dtype_name(requested));
}

}  // namespace px
