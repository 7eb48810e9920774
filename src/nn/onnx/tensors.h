// ONNX tensors and attributes as parallax values: an initializer or a
// Constant's TensorProto becomes a Tensor (floats f32; integers i64, the
// type ONNX's shape arithmetic uses), and a node's attributes are read with
// defaults, errors naming the node.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "core/tensor.h"

namespace px::nn {

// The dims of `t` as a Shape.
Shape tensor_shape(const ::onnx::TensorProto& t);
// px::Error naming the tensor unless its data holds exactly the elements
// its dims say, in a type parallax reads, inside the file.
void check_tensor_data(const ::onnx::TensorProto& t);
// The tensor's values: FLOAT -> f32, INT64/INT32/BOOL -> i64.
Tensor to_tensor(const ::onnx::TensorProto& t);

// A node's attributes; `fallback` when absent.
const ::onnx::AttributeProto* find_attribute(const ::onnx::NodeProto& node, const std::string& name);
int64_t attr_int(const ::onnx::NodeProto& node, const std::string& name, int64_t fallback);
double attr_float(const ::onnx::NodeProto& node, const std::string& name, double fallback);
std::string attr_string(const ::onnx::NodeProto& node, const std::string& name, const std::string& fallback);
std::optional<std::vector<int64_t>> attr_ints(const ::onnx::NodeProto& node, const std::string& name);

// "node '<name>' (<op_type>)" for error messages.
std::string describe(const ::onnx::NodeProto& node);

}  // namespace px::nn
