#include "op_harness.h"

#include <cmath>
#include <cstring>

#include "kernels/bf16.h"

namespace px::testing {

std::vector<Tensor> random_inputs(const OpExample& example, Rng& rng) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < example.inputs.size(); ++i) {
    const TensorSpec& s = example.inputs[i];
    Tensor t = Tensor::empty(s.shape, s.dtype);
    int64_t upper = i < example.int_upper.size() ? example.int_upper[i] : 0;
    const bool positive = i < example.positive.size() && example.positive[i];
    for (int64_t j = 0; j < t.numel(); ++j) {
      switch (s.dtype) {
        case DType::f32:
          t.f32()[j] = static_cast<float>(positive ? 0.5 + rng.uniform() : rng.normal());
          break;
        case DType::i32: t.data<int32_t>()[j] = static_cast<int32_t>(rng.below(upper)); break;
        case DType::i64: t.data<int64_t>()[j] = static_cast<int64_t>(rng.below(upper)); break;
        case DType::u8: t.data<uint8_t>()[j] = static_cast<uint8_t>(rng.below(upper)); break;
        default: PX_CHECK(false, "unsupported example dtype");
      }
    }
    out.push_back(std::move(t));
  }
  if (example.draw) example.draw(out, rng.next_u64());
  return out;
}

Tensor slice_dim(const Tensor& t, int dim, int64_t lo, int64_t hi) {
  const Shape& s = t.shape();
  std::vector<int64_t> dims = s.dims();
  dims[dim] = hi - lo;
  Tensor out = Tensor::empty(Shape(dims), t.dtype());
  size_t elem = dtype_size(t.dtype());
  int64_t outer = s.numel(0, dim), inner = s.numel(dim + 1, s.rank());
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(out.raw());
  size_t block = static_cast<size_t>((hi - lo) * inner) * elem;
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * block, src + static_cast<size_t>((o * s[dim] + lo) * inner) * elem, block);
  return out;
}

Tensor concat_dim(const std::vector<Tensor>& parts, int dim) {
  std::vector<int64_t> dims = parts[0].shape().dims();
  dims[dim] = 0;
  for (const auto& p : parts) dims[dim] += p.dim(dim);
  Tensor out = Tensor::empty(Shape(dims), parts[0].dtype());
  size_t elem = dtype_size(out.dtype());
  int64_t outer = out.shape().numel(0, dim), inner = out.shape().numel(dim + 1, out.rank());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (const auto& p : parts) {
      size_t block = static_cast<size_t>(p.dim(dim) * inner) * elem;
      std::memcpy(dst, static_cast<const char*>(p.raw()) + o * block, block);
      dst += block;
    }
  return out;
}

std::vector<Tensor> run_op(const OpDef& def, const Attrs& attrs, const std::vector<Tensor>& inputs,
                           const OpContext& context) {
  std::vector<TensorSpec> specs;
  std::vector<const Tensor*> in;
  for (const auto& t : inputs) {
    specs.push_back({t.shape(), t.dtype()});
    in.push_back(&t);
  }
  std::vector<Tensor> outputs;
  for (const auto& s : def.infer(specs, attrs)) outputs.push_back(Tensor::empty(s.shape, s.dtype));
  if (def.output_is_view) outputs[0] = inputs[0].reshape(outputs[0].shape());
  std::vector<Tensor*> out;
  for (auto& t : outputs) out.push_back(&t);
  def.forward(context, attrs, in, out);
  return outputs;
}

static double as_double(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.f32()[i];
    case DType::bf16: return kernels::to_float(static_cast<const kernels::bf16*>(t.raw())[i]);
    case DType::i32: return t.data<int32_t>()[i];
    case DType::i64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::u8: return t.data<uint8_t>()[i];
    default: PX_CHECK(false, "unsupported dtype");
  }
}

double max_relative_diff(const Tensor& a, const Tensor& b) {
  PX_CHECK(a.shape() == b.shape(), "{} vs {}", a.shape(), b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = as_double(a, i), y = as_double(b, i);
    double d = std::abs(x - y) / (1 + std::abs(y));
    if (!(d <= worst)) worst = d;  // NaN propagates as worst
  }
  return worst;
}

}  // namespace px::testing
