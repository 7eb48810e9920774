#include "nn/onnx/import_context.h"

#include <memory>

#include "core/error.h"
#include "nn/onnx/tensors.h"

namespace px::nn {

ImportContext::ImportContext(Graph& graph, const ::onnx::GraphProto& proto, int64_t batch, bool training)
    : graph_(graph), batch_(batch), training_(training) {
  for (const auto& t : proto.initializer()) initializers_[t.name()] = &t;
  for (const auto& o : proto.output()) outputs_.insert(o.name());
}

bool ImportContext::is_graph_output(const std::string& name) const { return outputs_.count(name) != 0; }

std::string ImportContext::input(const ::onnx::NodeProto& node, int i) {
  return i < node.input_size() ? node.input(i) : std::string();
}

std::string ImportContext::node_name(const ::onnx::NodeProto& node) {
  if (!node.name().empty()) return node.name();
  return node.output_size() > 0 ? node.output(0) : node.op_type();
}

bool ImportContext::defined(const std::string& name) const {
  return values_.count(name) != 0 || constants_.count(name) != 0 || initializers_.count(name) != 0;
}

bool ImportContext::is_constant(const std::string& name) const {
  if (constants_.count(name) != 0) return true;
  auto it = initializers_.find(name);
  return it != initializers_.end() && it->second->data_type() != ::onnx::TensorProto::FLOAT;
}

ValueId ImportContext::value(const std::string& name, const ::onnx::NodeProto& node) {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  auto init = initializers_.find(name);
  if (init != initializers_.end() && init->second->data_type() == ::onnx::TensorProto::FLOAT) {
    // Parameters keep their ONNX names and values. Matrices and kernels
    // decay under AdamW, vectors (biases, norms) do not: the built-in
    // models' rule, and what the fixtures' torch optimizer is given.
    auto values = std::make_shared<const Tensor>(to_tensor(*init->second));
    const Shape shape = values->shape();
    ValueId id = graph_.param(name, {shape}, {.kind = ParamInit::Kind::zeros, .values = values}, shape.rank() >= 2);
    values_[name] = id;
    return id;
  }
  if (is_constant(name))
    fail("{} reads '{}' as a tensor, but it is a constant parallax folded at import (shape arithmetic); "
         "this operator takes only graph values there", describe(node), name);
  fail("{} reads '{}', which no earlier node, input or initializer defines", describe(node), name);
}

const Tensor& ImportContext::constant(const std::string& name, const ::onnx::NodeProto& node) {
  if (auto it = constants_.find(name); it != constants_.end()) return it->second;
  if (auto init = initializers_.find(name); init != initializers_.end())
    return constants_.emplace(name, to_tensor(*init->second)).first->second;
  fail("{} needs '{}' to be a constant known at import (e.g. a Reshape's shape); it is computed from the "
       "data, which parallax does not support there", describe(node), name);
}

TensorSpec ImportContext::spec(const std::string& name, const ::onnx::NodeProto& node) {
  if (is_constant(name)) {
    const Tensor& t = constant(name, node);
    return {t.shape(), t.dtype()};
  }
  return graph_.spec(value(name, node));
}

bool ImportContext::is_initializer(const std::string& name) const {
  return initializers_.count(name) != 0 && values_.count(name) == 0;
}

void ImportContext::alias_initializer(const std::string& alias, const std::string& name) {
  initializers_[alias] = initializers_.at(name);
}

void ImportContext::define(const std::string& name, ValueId id) { values_[name] = id; }

void ImportContext::define_constant(const std::string& name, Tensor value) {
  constants_.insert_or_assign(name, std::move(value));
}

}  // namespace px::nn
