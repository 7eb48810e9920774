// The elementwise folders: Add, Sub, Mul, Div, the comparisons, Not,
// Where and Expand, over constants with numpy broadcasting (a causal mask
// compared from positions, expand's -1 sizes resolved, an additive mask).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/onnx/fold.h"
#include "nn/onnx/fold_support.h"
#include "nn/onnx/tensors.h"

namespace px::nn::folding {

using ::onnx::NodeProto;

namespace {

// numpy broadcasting, as the elementwise operators, Where and Expand take
// it: the result's dims, and for each operand the element that the
// result's element j reads.
class Broadcast {
 public:
  Broadcast(const std::vector<Shape>& shapes, const NodeProto& node) {
    int rank = 0;
    for (const Shape& s : shapes) rank = std::max(rank, s.rank());
    dims_.assign(static_cast<size_t>(rank), 1);
    for (const Shape& s : shapes)
      for (int d = 0; d < s.rank(); ++d) {
        int64_t& out = dims_[static_cast<size_t>(rank - s.rank() + d)];
        if (s[d] != out && s[d] != 1 && out != 1) {
          std::vector<std::string> all;
          for (const Shape& t : shapes) all.push_back(fmt::format("{}", t));
          fail("{}: shapes {} do not broadcast", describe(node), fmt::join(all, " and "));
        }
        if (out == 1) out = s[d];
      }
  }
  const std::vector<int64_t>& dims() const { return dims_; }
  // The element of a tensor shaped `s` that the result's element `j` reads.
  int64_t source(const Shape& s, int64_t j) const {
    const int rank = static_cast<int>(dims_.size());
    int64_t index = 0, stride = 1, below = 1;  // below: the result's elements under dim d
    for (int d = rank - 1; d >= 0; --d) {
      const int k = d - (rank - s.rank());
      if (k >= 0) {
        if (s[k] != 1) index += (j / below % dims_[static_cast<size_t>(d)]) * stride;
        stride *= s[k];
      }
      below *= dims_[static_cast<size_t>(d)];
    }
    return index;
  }

 private:
  std::vector<int64_t> dims_;
};

}  // namespace

// Add, Sub, Mul, Div with numpy broadcasting, in i64 when both are.
Outputs fold_arithmetic(ImportContext& c, const NodeProto& node) {
  const Tensor &a = folded_input(c, node, 0), &b = folded_input(c, node, 1);
  const Broadcast shape({a.shape(), b.shape()}, node);
  const bool ints = a.dtype() == DType::i64 && b.dtype() == DType::i64;
  Tensor out = folded_output(shape.dims(), ints ? DType::i64 : DType::f32, node);
  const std::string& op = node.op_type();
  for (int64_t j = 0; j < out.numel(); ++j) {
    const int64_t ia = shape.source(a.shape(), j), ib = shape.source(b.shape(), j);
    if (ints) {
      const int64_t x = a.data<int64_t>()[ia], y = b.data<int64_t>()[ib];
      int64_t r = 0;
      bool overflow = false;
      if (op == "Add") overflow = __builtin_add_overflow(x, y, &r);
      else if (op == "Sub") overflow = __builtin_sub_overflow(x, y, &r);
      else if (op == "Mul") overflow = __builtin_mul_overflow(x, y, &r);
      else if (y == 0) fail("{}: integer division by zero", describe(node));
      else if (x == std::numeric_limits<int64_t>::min() && y == -1) overflow = true;
      else r = x / y;
      if (overflow) fail("{}: {} {} {} overflows int64", describe(node), x, op, y);
      out.data<int64_t>()[j] = r;
    } else {
      // In float, as the model would compute it: an overflow is inf, not a
      // double out of float's range.
      const float x = static_cast<float>(number(a, ia)), y = static_cast<float>(number(b, ib));
      out.f32()[j] = op == "Add" ? x + y : op == "Sub" ? x - y : op == "Mul" ? x * y : x / y;
    }
  }
  return {out};
}

// Equal, Less, LessOrEqual, Greater, GreaterOrEqual with numpy
// broadcasting, as i64 0/1 (ONNX's bool): a causal mask made by comparing
// positions (arange(T) > arange(T)ᵀ), or a mask compared with 0.
Outputs fold_comparison(ImportContext& c, const NodeProto& node) {
  const Tensor &a = folded_input(c, node, 0), &b = folded_input(c, node, 1);
  const Broadcast shape({a.shape(), b.shape()}, node);
  const bool ints = a.dtype() == DType::i64 && b.dtype() == DType::i64;
  Tensor out = folded_output(shape.dims(), DType::i64, node);
  const std::string& op = node.op_type();
  for (int64_t j = 0; j < out.numel(); ++j) {
    const int64_t ia = shape.source(a.shape(), j), ib = shape.source(b.shape(), j);
    // -1, 0 or 1: a below, equal to or above b; int64 compared exactly, a
    // float operand in float, as the model would (NaN compares false).
    int order = 0;
    if (ints) {
      const int64_t x = a.data<int64_t>()[ia], y = b.data<int64_t>()[ib];
      order = (x > y) - (x < y);
    } else {
      const float x = static_cast<float>(number(a, ia)), y = static_cast<float>(number(b, ib));
      if (std::isnan(x) || std::isnan(y)) {
        out.data<int64_t>()[j] = 0;
        continue;
      }
      order = (x > y) - (x < y);
    }
    const bool holds = op == "Equal" ? order == 0 : op == "Less" ? order < 0 : op == "LessOrEqual" ? order <= 0
                       : op == "Greater" ? order > 0 : order >= 0;  // GreaterOrEqual
    out.data<int64_t>()[j] = holds;
  }
  return {out};
}

// Not of a bool (i64 0/1) constant: ~mask.
Outputs fold_not(ImportContext& c, const NodeProto& node) {
  const Tensor& x = folded_input(c, node, 0);
  Tensor out = Tensor::empty(x.shape(), DType::i64);
  for (int64_t i = 0; i < x.numel(); ++i) out.data<int64_t>()[i] = number(x, i) == 0;
  return {out};
}

// Where(cond, x, y) of constants with numpy broadcasting: torch writes it
// to resolve expand's -1 sizes (Where(shape == -1, 1, shape)) and to make
// an additive mask (Where(causal, 0, -inf)). Float when either branch is.
Outputs fold_where(ImportContext& c, const NodeProto& node) {
  const Tensor &cond = folded_input(c, node, 0), &x = folded_input(c, node, 1), &y = folded_input(c, node, 2);
  const Broadcast shape({cond.shape(), x.shape(), y.shape()}, node);
  const bool ints = x.dtype() == DType::i64 && y.dtype() == DType::i64;
  Tensor out = folded_output(shape.dims(), ints ? DType::i64 : DType::f32, node);
  for (int64_t j = 0; j < out.numel(); ++j) {
    const bool first = number(cond, shape.source(cond.shape(), j)) != 0;
    const Tensor& from = first ? x : y;
    const int64_t i = shape.source(from.shape(), j);
    if (ints) out.data<int64_t>()[j] = from.data<int64_t>()[i];
    else out.f32()[j] = static_cast<float>(number(from, i));
  }
  return {out};
}

// Expand(x, shape): x broadcast with `shape` (numpy's rule: a 1 in either
// keeps the other's dim), positions arange(T) repeated over the batch.
Outputs fold_expand(ImportContext& c, const NodeProto& node) {
  const Tensor& x = folded_input(c, node, 0);
  const std::vector<int64_t> to = constant_ints(folded_input(c, node, 1));
  for (int64_t d : to)
    if (d < 0) fail("{}: shape [{}] has a negative size", describe(node), fmt::join(to, ","));
  const Broadcast shape({x.shape(), Shape(to)}, node);
  Tensor out = folded_output(shape.dims(), x.dtype(), node);
  for (int64_t j = 0; j < out.numel(); ++j) copy_element(x, shape.source(x.shape(), j), out, j);
  return {out};
}

}  // namespace px::nn::folding
