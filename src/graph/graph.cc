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

ValueId Graph::param(const std::string& name, const TensorSpec& spec, ParamInit init, bool weight_decay,
                     double sign_rate) {
  ValueId id = new_value({.kind = Value::Kind::param,
                          .spec = spec,
                          .name = name,
                          .init = init,
                          .weight_decay = weight_decay,
                          .sign_rate = sign_rate});
  params_.push_back(id);
  return id;
}

std::string Graph::scoped(const std::string& name) const {
  std::string out;
  for (const auto& s : scopes_) out += (out.empty() ? "" : ".") + s;
  if (!name.empty()) out += (out.empty() ? "" : ".") + name;
  return out;
}

std::vector<TensorSpec> Graph::infer(const Node& node) const {
  std::vector<TensorSpec> in_specs;
  for (ValueId id : node.inputs) {
    PX_CHECK(id >= 0 && id < static_cast<ValueId>(values_.size()), "op {} input id {}", node.op(), id);
    in_specs.push_back(spec(id));
  }
  try {
    return node.def->infer(in_specs, node.attrs);
  } catch (const Error& e) {
    std::string shapes;
    for (const auto& s : in_specs) shapes += (shapes.empty() ? "" : ", ") + s.str();
    fail("op {} '{}' with inputs ({}) and attributes {}: {}", node.op(), node.name, shapes, node.attrs.str(),
         e.what());
  }
}

std::vector<ValueId> Graph::add(const std::string& op, const std::vector<ValueId>& inputs,
                                const Attrs& attrs, const std::string& name) {
  Node node{.def = &OpRegistry::instance().get(op), .attrs = attrs, .inputs = inputs, .outputs = {},
            .name = scoped(name)};
  const std::vector<TensorSpec> out_specs = infer(node);
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

std::vector<ValueId> Graph::insert_after(int after, const std::string& op, const std::vector<ValueId>& inputs,
                                         const Attrs& attrs, const std::string& name) {
  return insert_after({{.after = after, .op = op, .inputs = inputs, .attrs = attrs, .name = name}}).front();
}

std::vector<std::vector<ValueId>> Graph::insert_after(const std::vector<Insertion>& insertions) {
  const size_t node_count = nodes_.size();
  std::vector<std::vector<size_t>> behind(node_count);  // by node: the insertions that go right after it
  for (size_t k = 0; k < insertions.size(); ++k) {
    const Insertion& in = insertions[k];
    PX_CHECK(in.after >= 0 && in.after < static_cast<int>(node_count), "insert_after: node {} of {}", in.after,
             node_count);
    for (ValueId v : in.inputs)
      PX_CHECK(v >= 0 && v < static_cast<ValueId>(values_.size()) && values_[static_cast<size_t>(v)].producer <= in.after,
               "insert_after: '{}' after node {} cannot read value {} made later", in.name, in.after, v);
    behind[static_cast<size_t>(in.after)].push_back(k);
  }
  std::vector<std::vector<ValueId>> outputs;
  for (const Insertion& in : insertions) outputs.push_back(add(in.op, in.inputs, in.attrs, in.name));
  // Where every node lands: the old ones in order, each followed by its insertions.
  std::vector<int> new_index(nodes_.size());
  int next = 0;
  for (size_t n = 0; n < node_count; ++n) {
    new_index[n] = next++;
    for (size_t k : behind[n]) new_index[node_count + k] = next++;
  }
  for (size_t k = 0; k < insertions.size(); ++k) {  // an insertion serves what the node before it (or named) serves
    const int of = insertions[k].origin_of >= 0 ? insertions[k].origin_of : insertions[k].after;
    PX_CHECK(of < static_cast<int>(node_count), "insert_after: '{}' takes the origin of node {} of {}",
             insertions[k].name, of, node_count);
    nodes_[node_count + k].origin = nodes_[static_cast<size_t>(of)].origin;
  }
  std::vector<Node> nodes(nodes_.size());
  for (size_t n = 0; n < nodes_.size(); ++n) nodes[static_cast<size_t>(new_index[n])] = std::move(nodes_[n]);
  for (Node& node : nodes)
    if (node.origin >= 0) node.origin = new_index[static_cast<size_t>(node.origin)];
  nodes_ = std::move(nodes);
  for (Value& v : values_)
    if (v.producer >= 0) v.producer = new_index[static_cast<size_t>(v.producer)];
  return outputs;
}

std::vector<ValueId> Graph::insert_before(int before, const std::string& op, const std::vector<ValueId>& inputs,
                                          const Attrs& attrs, const std::string& name) {
  PX_CHECK(before >= 1 && before < static_cast<int>(nodes_.size()), "insert_before: node {} of {}", before,
           nodes_.size());
  const std::vector<ValueId> outputs = insert_after(before - 1, op, inputs, attrs, name);
  nodes_[static_cast<size_t>(before)].origin = nodes_[static_cast<size_t>(before) + 1].origin;
  return outputs;
}

void Graph::set_input(int node, size_t index, ValueId value) {
  Node& n = nodes_.at(static_cast<size_t>(node));
  PX_CHECK(index < n.inputs.size(), "node '{}' has {} inputs, not {}", n.name, n.inputs.size(), index + 1);
  PX_CHECK(values_.at(static_cast<size_t>(value)).producer < node, "node '{}' cannot read value {} made after it",
           n.name, value);
  n.inputs[index] = value;
  const std::vector<TensorSpec> out_specs = infer(n);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    TensorSpec& spec = values_[static_cast<size_t>(n.outputs[i])].spec;
    PX_CHECK(out_specs.at(i).shape == spec.shape, "node '{}' reading value {}: output {} would be {}, not {}",
             n.name, value, i, out_specs[i].str(), spec.str());
    spec = out_specs[i];
  }
}

std::vector<ValueId> Graph::replace(int node, const std::string& op, const std::vector<ValueId>& inputs,
                                   const Attrs& attrs, const std::string& name,
                                   const std::vector<std::string>& extra_names) {
  Node& n = nodes_.at(static_cast<size_t>(node));
  for (ValueId v : inputs)
    PX_CHECK(values_.at(static_cast<size_t>(v)).producer < node, "node '{}' cannot read value {} made after it",
             n.name, v);
  n.def = &OpRegistry::instance().get(op);
  n.inputs = inputs;
  n.attrs = attrs;
  n.name = name;
  const std::vector<TensorSpec> out_specs = infer(n);
  PX_CHECK_GE(out_specs.size(), n.outputs.size());
  for (size_t i = 0; i < n.outputs.size(); ++i)
    PX_CHECK(out_specs[i] == values_[static_cast<size_t>(n.outputs[i])].spec,
             "node '{}' as {}: output {} would be {}, not {}", n.name, op, i, out_specs[i].str(),
             values_[static_cast<size_t>(n.outputs[i])].spec.str());
  const size_t kept = n.outputs.size();
  for (size_t i = kept; i < out_specs.size(); ++i) {
    Value v;
    v.spec = out_specs[i];
    v.name = i - kept < extra_names.size() ? extra_names[i - kept] : fmt::format("{}:{}", name, i);
    v.producer = node;
    v.output_index = static_cast<int>(i);
    n.outputs.push_back(new_value(std::move(v)));  // values_ grows; nodes_, and so n, do not move
  }
  return n.outputs;
}

std::vector<ValueId> Graph::erase(const std::vector<Erasure>& erasures) {
  const size_t node_count = nodes_.size();
  std::vector<bool> erased(node_count, false);
  std::vector<int> heir_of(node_count, -1);
  for (const Erasure& e : erasures) {
    PX_CHECK(e.node >= 0 && e.node < static_cast<int>(node_count), "erase: node {} of {}", e.node, node_count);
    PX_CHECK(!erased[static_cast<size_t>(e.node)], "erase: node '{}' named twice", nodes_[static_cast<size_t>(e.node)].name);
    erased[static_cast<size_t>(e.node)] = true;
    heir_of[static_cast<size_t>(e.node)] = e.heir;
  }
  for (const Erasure& e : erasures)
    PX_CHECK(e.heir == -1 || (e.heir >= 0 && e.heir < static_cast<int>(node_count) && !erased[static_cast<size_t>(e.heir)]),
             "erase: heir {} of node '{}' is not a node that stays", e.heir, nodes_[static_cast<size_t>(e.node)].name);
  std::vector<bool> removed(values_.size(), false);
  for (size_t n = 0; n < node_count; ++n)
    if (erased[n])
      for (ValueId v : nodes_[n].outputs) removed[static_cast<size_t>(v)] = true;
  for (size_t n = 0; n < node_count; ++n) {
    if (erased[n]) continue;
    const Node& kept = nodes_[n];
    for (ValueId v : kept.inputs)
      PX_CHECK(!removed[static_cast<size_t>(v)], "erase: '{}' reads '{}'", kept.name,
               nodes_[static_cast<size_t>(values_[static_cast<size_t>(v)].producer)].name);
    PX_CHECK(kept.origin < 0 || !erased[static_cast<size_t>(kept.origin)] ||
                 heir_of[static_cast<size_t>(kept.origin)] >= 0,
             "erase: node '{}' is the origin of '{}' and has no heir", nodes_[static_cast<size_t>(kept.origin)].name,
             kept.name);
  }
  for (const auto& [name, v] : outputs_) PX_CHECK(!removed[static_cast<size_t>(v)], "erase: '{}' is an output", name);

  std::vector<int> new_node(node_count, -1);
  int next_node = 0;
  for (size_t n = 0; n < node_count; ++n)
    if (!erased[n]) new_node[n] = next_node++;
  std::vector<ValueId> new_id(values_.size(), kNoValue);
  ValueId next_value = 0;
  for (size_t v = 0; v < values_.size(); ++v)
    if (!removed[v]) new_id[v] = next_value++;

  std::vector<Value> values;
  values.reserve(static_cast<size_t>(next_value));
  for (size_t v = 0; v < values_.size(); ++v)
    if (!removed[v]) {
      values.push_back(std::move(values_[v]));
      Value& value = values.back();
      if (value.producer >= 0) value.producer = new_node[static_cast<size_t>(value.producer)];
    }
  values_ = std::move(values);
  std::vector<Node> nodes;
  nodes.reserve(static_cast<size_t>(next_node));
  for (size_t n = 0; n < node_count; ++n) {
    if (erased[n]) continue;
    nodes.push_back(std::move(nodes_[n]));
    Node& node = nodes.back();
    if (node.origin >= 0) {
      const auto origin = static_cast<size_t>(node.origin);
      node.origin = new_node[erased[origin] ? static_cast<size_t>(heir_of[origin]) : origin];
    }
    for (ValueId& v : node.inputs) v = new_id[static_cast<size_t>(v)];
    for (ValueId& v : node.outputs) v = new_id[static_cast<size_t>(v)];
  }
  nodes_ = std::move(nodes);
  for (ValueId& v : params_) v = new_id[static_cast<size_t>(v)];
  for (ValueId& v : inputs_) v = new_id[static_cast<size_t>(v)];
  for (auto& [name, v] : outputs_) v = new_id[static_cast<size_t>(v)];
  return new_id;
}

void Graph::set_origin(int first, int origin) {
  for (size_t n = static_cast<size_t>(first); n < nodes_.size(); ++n) nodes_[n].origin = origin;
}

void Graph::set_dtype(ValueId value, DType dtype) {
  values_.at(static_cast<size_t>(value)).spec.dtype = dtype;
}

void Graph::set_attr(int node, const std::string& name, AttrValue value) {
  nodes_.at(static_cast<size_t>(node)).attrs.set(name, std::move(value));
}

void Graph::erase_attr(int node, const std::string& name) { nodes_.at(static_cast<size_t>(node)).attrs.erase(name); }

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
