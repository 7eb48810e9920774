#include "graph/autodiff.h"

#include <set>

#include "core/error.h"
#include "graph/precision.h"

namespace px {

ValueId Gradients::at(ValueId value) const {
  auto it = of.find(value);
  if (it == of.end()) fail("value {} has no gradient: it does not affect the loss", value);
  return it->second;
}

Gradients build_backward(Graph& graph, ValueId loss, const std::vector<ValueId>& wrt) {
  if (graph.spec(loss).shape.rank() != 0)
    fail("loss '{}' must be a scalar, got shape {}", graph.value(loss).name, graph.spec(loss).shape);

  // Values that depend on something in `wrt` (forward reachability).
  std::set<ValueId> requires_grad(wrt.begin(), wrt.end());
  const size_t forward_nodes = graph.nodes().size();
  for (size_t n = 0; n < forward_nodes; ++n) {
    const Node& node = graph.nodes()[n];
    bool any = false;
    for (ValueId in : node.inputs) any = any || requires_grad.count(in);
    if (any)
      for (ValueId out : node.outputs) requires_grad.insert(out);
  }

  std::map<ValueId, ValueId> grad;
  auto accumulate = [&](ValueId value, ValueId g) {
    auto it = grad.find(value);
    if (it == grad.end()) {
      grad[value] = g;
    } else {
      it->second = graph.add1("add", {it->second, g}, {}, graph.value(value).name + ".grad_sum");
    }
  };
  const int seed_node = static_cast<int>(graph.nodes().size());
  grad[loss] = graph.add1("fill", {}, {{"value", 1.0}, {"shape", std::vector<int64_t>{}}}, "loss.grad");
  graph.set_origin(seed_node, graph.value(loss).producer);

  for (size_t n = forward_nodes; n-- > 0;) {
    // Copy: backward rules append nodes, which may reallocate the node vector.
    const Node node = graph.nodes()[n];
    std::vector<ValueId> out_grads;
    bool any = false;
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      auto it = grad.find(node.outputs[i]);
      bool differentiable = static_cast<int>(i) < node.def->differentiable_outputs;
      out_grads.push_back(it != grad.end() && differentiable ? it->second : kNoValue);
      any = any || out_grads.back() != kNoValue;
    }
    bool needs = false;
    for (ValueId in : node.inputs) needs = needs || requires_grad.count(in);
    if (!any || !needs) continue;
    PX_CHECK(static_cast<bool>(node.def->backward), "op '{}' ('{}') is on the loss path but has no backward rule",
             node.op(), node.name);
    const int first = static_cast<int>(graph.nodes().size());
    std::vector<ValueId> in_grads = node.def->backward(graph, node, out_grads);
    PX_CHECK_EQ(in_grads.size(), node.inputs.size());
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (in_grads[i] != kNoValue && requires_grad.count(node.inputs[i]))
        accumulate(node.inputs[i], in_grads[i]);
    graph.set_origin(first, static_cast<int>(n));
    inherit_precision(graph, first, static_cast<int>(n));
  }

  Gradients out;
  for (ValueId v : wrt)
    if (grad.count(v)) out.of[v] = grad[v];
  return out;
}

}  // namespace px
