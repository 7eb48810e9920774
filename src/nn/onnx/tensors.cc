#include "nn/onnx/tensors.h"

#include <cstring>

#include "core/error.h"

namespace px::nn {
namespace {

using ::onnx::TensorProto;

// Bytes one element of `type` takes in raw_data; 0 for types not read.
size_t element_bytes(int type) {
  switch (type) {
    case TensorProto::FLOAT: return 4;
    case TensorProto::INT64: return 8;
    case TensorProto::INT32: return 4;
    case TensorProto::BOOL: return 1;
    default: return 0;
  }
}

// Elements held in the typed (non-raw) field of `type`.
int64_t typed_count(const TensorProto& t) {
  switch (t.data_type()) {
    case TensorProto::FLOAT: return t.float_data_size();
    case TensorProto::INT64: return t.int64_data_size();
    default: return t.int32_data_size();  // INT32 and BOOL live in int32_data
  }
}

}  // namespace

Shape tensor_shape(const TensorProto& t) {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  return Shape(dims);
}

void check_tensor_data(const TensorProto& t) {
  const std::string name = t.name().empty() ? "(unnamed)" : t.name();
  if (t.data_location() == TensorProto::EXTERNAL)
    fail("tensor '{}' keeps its data in an external file; export with the weights inside the model "
         "(models under 2 GB: torch.onnx.export's default)", name);
  const size_t bytes = element_bytes(t.data_type());
  if (bytes == 0)
    fail("tensor '{}' has ONNX data type {} ({}); parallax reads FLOAT, INT64, INT32 and BOOL", name,
         t.data_type(), TensorProto::DataType_Name(static_cast<TensorProto::DataType>(t.data_type())));
  for (int64_t d : t.dims())
    if (d < 0) fail("tensor '{}' has a negative dim {}", name, d);
  const int64_t expected = tensor_shape(t).numel();
  if (t.has_raw_data()) {
    if (t.raw_data().size() != static_cast<size_t>(expected) * bytes)
      fail("initializer '{}' has {} bytes of data; its shape {} needs {} ({} elements of {} bytes)", name,
           t.raw_data().size(), tensor_shape(t), static_cast<size_t>(expected) * bytes, expected, bytes);
  } else if (typed_count(t) != expected) {
    fail("initializer '{}' has {} elements; its shape {} needs {}", name, typed_count(t), tensor_shape(t),
         expected);
  }
}

Tensor to_tensor(const TensorProto& t) {
  check_tensor_data(t);
  const Shape shape = tensor_shape(t);
  const int64_t n = shape.numel();
  const bool raw = t.has_raw_data();
  const char* bytes = t.raw_data().data();
  if (t.data_type() == TensorProto::FLOAT) {
    Tensor out = Tensor::empty(shape, DType::f32);
    float* p = out.f32();
    if (raw) std::memcpy(p, bytes, static_cast<size_t>(n) * 4);
    else for (int64_t i = 0; i < n; ++i) p[i] = t.float_data(static_cast<int>(i));
    return out;
  }
  Tensor out = Tensor::empty(shape, DType::i64);
  int64_t* p = out.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(i);
    switch (t.data_type()) {
      case TensorProto::INT64:
        if (raw) std::memcpy(&p[i], bytes + 8 * i, 8);
        else p[i] = t.int64_data(k);
        break;
      case TensorProto::INT32: {
        int32_t v = 0;
        if (raw) std::memcpy(&v, bytes + 4 * i, 4);
        else v = t.int32_data(k);
        p[i] = v;
        break;
      }
      default: p[i] = raw ? static_cast<int64_t>(bytes[i] != 0) : int64_t{t.int32_data(k) != 0};  // BOOL
    }
  }
  return out;
}

const ::onnx::AttributeProto* find_attribute(const ::onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t attr_int(const ::onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  const auto* a = find_attribute(node, name);
  return a == nullptr ? fallback : a->i();
}

double attr_float(const ::onnx::NodeProto& node, const std::string& name, double fallback) {
  const auto* a = find_attribute(node, name);
  return a == nullptr ? fallback : a->f();
}

std::string attr_string(const ::onnx::NodeProto& node, const std::string& name, const std::string& fallback) {
  const auto* a = find_attribute(node, name);
  return a == nullptr ? fallback : a->s();
}

std::optional<std::vector<int64_t>> attr_ints(const ::onnx::NodeProto& node, const std::string& name) {
  const auto* a = find_attribute(node, name);
  if (a == nullptr) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::string describe(const ::onnx::NodeProto& node) {
  return fmt::format("node '{}' ({})", node.name(), node.op_type());
}

}  // namespace px::nn
