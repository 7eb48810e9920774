// Tensor: a dense, contiguous, row-major n-d array over reference-counted,
// 64-byte aligned storage. Copies share storage (like a torch tensor);
// clone() copies the data. reshape() is a view with the same storage.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace px {

class Storage {
 public:
  explicit Storage(size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_;
  size_t bytes_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  // Uninitialized contents.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, float value);
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  static Tensor from_vector(const Shape& shape, const std::vector<int32_t>& values);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int axis) const { return shape_[axis]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* raw() { return static_cast<char*>(storage_->data()) + offset_bytes_; }
  const void* raw() const { return static_cast<const char*>(storage_->data()) + offset_bytes_; }
  // Typed access; checks that T matches dtype().
  template <typename T>
  T* data() {
    check_type(dtype_of<T>());
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    check_type(dtype_of<T>());
    return static_cast<const T*>(raw());
  }
  float* f32() { return data<float>(); }
  const float* f32() const { return data<float>(); }
  template <typename T>
  std::span<T> span() { return {data<T>(), static_cast<size_t>(numel())}; }
  template <typename T>
  std::span<const T> span() const { return {data<T>(), static_cast<size_t>(numel())}; }
  std::vector<float> to_vector() const;

  Tensor clone() const;
  // A view with the same storage and a new shape of equal numel.
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) along axis 0, a view sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  void fill(float value);
  void zero();
  // Copies src's bytes; shapes must have equal numel and dtypes match.
  void copy_from(const Tensor& src);
  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }

 private:
  void check_type(DType requested) const;
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace px
