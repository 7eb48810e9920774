#include "nn/onnx/fold_support.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "nn/onnx/tensors.h"

namespace px::nn::folding {

using ::onnx::NodeProto;

void copy_element(const Tensor& src, int64_t i, Tensor& dst, int64_t j) {
  const size_t n = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw()) + j * n, static_cast<const char*>(src.raw()) + i * n, n);
}

double number(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f32 ? double(t.f32()[i]) : double(t.data<int64_t>()[i]);
}

int64_t integer_of(float v, const std::string& where) {
  if (!(std::fabs(v) < 9.2e18f)) fail("{}: {} is not an integer parallax can fold", where, v);
  return static_cast<int64_t>(v);
}
int64_t integer_of(float v, const NodeProto& node) { return integer_of(v, describe(node)); }

int axis_of(int64_t a, int rank, const NodeProto& node) {
  if (a < -rank || a >= rank) fail("{}: axis {} is outside rank {}", describe(node), a, rank);
  return static_cast<int>(a < 0 ? a + rank : a);
}

const Tensor& folded_input(ImportContext& c, const NodeProto& node, int i) {
  return c.constant(ImportContext::input(node, i), node);
}

Tensor folded_output(const std::vector<int64_t>& dims, DType dtype, const NodeProto& node) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) fail("{}: folds to shape [{}], which has a negative dim", describe(node), fmt::join(dims, ","));
    if (d > 0 && n > kMaxFoldedElements / d)
      fail("{}: folds to shape [{}], more than the {} elements a folded constant may have", describe(node),
           fmt::join(dims, ","), kMaxFoldedElements);
    n *= d;
  }
  return Tensor::empty(Shape(dims), dtype);
}

}  // namespace px::nn::folding
