// Export: the original ONNX graph, untouched but for its initializers,
// which take the trained values (float32, in raw_data). Parameters parallax
// split off an Identity of an initializer (torch's sharing of equal
// initial values) become initializers of their own again, replacing the
// Identity node, since training made them differ.
#include <fstream>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "nn/onnx/onnx_import.h"
#include "nn/onnx/tensors.h"

namespace px::nn {
namespace {

void set_values(::onnx::TensorProto& t, const std::string& name, const Tensor& values) {
  if (tensor_shape(t) != values.shape() || values.dtype() != DType::f32)
    fail("onnx export: parameter '{}' has shape {} ({}), the model's initializer {}", name, values.shape(),
         dtype_name(values.dtype()), tensor_shape(t));
  t.clear_float_data();
  t.set_data_type(::onnx::TensorProto::FLOAT);
  t.set_raw_data(std::string(static_cast<const char*>(values.raw()), values.nbytes()));
}

::onnx::ModelProto read_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  ::onnx::ModelProto model;
  if (!in || !model.ParseFromString(bytes.str()) || !model.has_graph())
    fail("onnx export: cannot read the model '{}' the checkpoint was trained from", path);
  return model;
}

}  // namespace

void export_onnx(const std::string& model_path, const std::map<std::string, Tensor>& parameters,
                 const std::string& out_path) {
  ::onnx::ModelProto model = read_model(model_path);
  ::onnx::GraphProto& graph = *model.mutable_graph();
  std::set<std::string> written;
  for (auto& t : *graph.mutable_initializer()) {
    auto it = parameters.find(t.name());
    if (it == parameters.end()) continue;  // a constant (shapes, a mask buffer) or an unused initializer
    set_values(t, t.name(), it->second);
    written.insert(t.name());
  }
  google::protobuf::RepeatedPtrField<::onnx::NodeProto> nodes;
  for (const auto& node : graph.node()) {
    const bool split_off = node.op_type() == "Identity" && node.output_size() == 1 &&
                           parameters.count(node.output(0)) != 0 && written.count(node.output(0)) == 0;
    if (!split_off) {
      *nodes.Add() = node;
      continue;
    }
    ::onnx::TensorProto* t = graph.add_initializer();
    for (const auto& source : graph.initializer())
      if (source.name() == node.input(0)) *t = source;
    t->set_name(node.output(0));
    set_values(*t, node.output(0), parameters.at(node.output(0)));
    written.insert(node.output(0));
  }
  graph.mutable_node()->Swap(&nodes);
  for (const auto& [name, values] : parameters)
    if (written.count(name) == 0)
      fail("onnx export: parameter '{}' is not an initializer of '{}' (was the checkpoint trained from it?)", name,
           model_path);
  write_file_atomically(out_path, model.SerializeAsString());
}

}  // namespace px::nn
