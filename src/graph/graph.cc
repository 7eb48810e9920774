#include "graph/graph.h"

#include "core/error.h"

namespace px {

ValueId Graph::new_value(Value v) {
  values_.push_back(std::move(v));
  return static_cast<ValueId>(values_.size() - 1);
}

ValueId Graph::input(const std::string& name, const TensorSpec& spec) {
  Value v;
  v.kind = Value::Kind::input;
  v.spec = spec;
  v.name = name;
  ValueId id = new_value(std::move(v));
  inputs_.push_back(id);
  return id;
}

ValueId Graph::param(const std::string& name, const TensorSpec& spec, ParamInit init,
                     bool weight_decay) {
  ValueId id = new_value({.kind = Value::Kind::param,
                          .spec = spec,
                          .name = name,
                          .init = init,
                          .weight_decay = weight_decay});
  params_.push_back(id);
  return id;
}

std::string Graph::scoped(const std::string& name) const {
  std::string out;
  for (const auto& s : scopes_) out += (out.empty() ? "" : ".") + s;
  if (!name.empty()) out += (out.empty() ? "" : ".") + name;
  return out;
}

std::vector<ValueId> Graph::add(const std::string& op, const std::vector<ValueId>& inputs,
                                const Attrs& attrs, const std::string& name) {
  const OpDef& def = OpRegistry::instance().get(op);
  std::vector<TensorSpec> in_specs;
  for (ValueId id : inputs) {
    PX_CHECK(id >= 0 && id < static_cast<ValueId>(values_.size()), "op {} input id {}", op, id);
    in_specs.push_back(spec(id));
  }
  Node node{.def = &def, .attrs = attrs, .inputs = inputs, .outputs = {}, .name = scoped(name)};
  std::vector<TensorSpec> out_specs;
  try {
    out_specs = def.infer(in_specs, attrs);
  } catch (const Error& e) {
    std::string shapes;
    for (const auto& s : in_specs) shapes += (shapes.empty() ? "" : ", ") + s.str();
    fail("op {} '{}' with inputs ({}) and attributes {}: {}", op, node.name, shapes, attrs.str(),
         e.what());
  }
  int index = static_cast<int>(nodes_.size());
  for (size_t i = 0; i < out_specs.size(); ++i)
  {
    Value v;
    v.spec = out_specs[i];
    v.name = node.name + (i == 0 ? "" : fmt::format(":{}", i));
    v.producer = index;
    v.output_index = static_cast<int>(i);
    node.outputs.push_back(new_value(std::move(v)));
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().outputs;
}

void Graph::set_origin(int first, int origin) {
  for (size_t n = static_cast<size_t>(first); n < nodes_.size(); ++n) nodes_[n].origin = origin;
}

void Graph::set_attr(int node, const std::string& name, AttrValue value) {
  nodes_.at(static_cast<size_t>(node)).attrs.set(name, std::move(value));
}

ValueId Graph::add1(const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs,
                    const std::string& name) {
  return add(op, inputs, attrs, name).front();
}

ValueId Graph::find(const std::string& name) const {
  for (ValueId id : params_)
    if (values_[id].name == name) return id;
  for (ValueId id : inputs_)
    if (values_[id].name == name) return id;
  fail("graph has no parameter or input named '{}'", name);
}

void Graph::mark_output(ValueId id, const std::string& name) { outputs_.emplace_back(name, id); }

ValueId Graph::output(const std::string& name) const {
  for (const auto& [n, id] : outputs_)
    if (n == name) return id;
  fail("graph has no output named '{}'", name);
}

int64_t Graph::param_count() const {
  int64_t n = 0;
  for (ValueId id : params_) n += values_[id].spec.shape.numel();
  return n;
}

std::string Graph::str() const {
  std::string out;
  for (const auto& n : nodes_) {
    out += fmt::format("{} = {}(", fmt::join(n.outputs, ","), n.op());
    for (size_t i = 0; i < n.inputs.size(); ++i)
      out += fmt::format("{}{}:{}", i ? ", " : "", n.inputs[i], spec(n.inputs[i]).str());
    out += fmt::format(") {} '{}'\n", n.attrs.str(), n.name);
  }
  return out;
}

}  // namespace px
