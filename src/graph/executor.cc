#include "graph/executor.h"

#include "core/error.h"
#include "core/memory.h"

namespace px {

Executor::Executor(const Graph& graph, std::vector<ValueId> wanted)
    : graph_(graph), wanted_(std::move(wanted)) {
  const auto& nodes = graph.nodes();
  const size_t n_values = graph.values().size();
  // Backward sweep: which nodes are needed for the wanted values.
  std::vector<bool> needed_value(n_values, false), needed_node(nodes.size(), false);
  for (ValueId v : wanted_) needed_value[v] = true;
  for (size_t n = nodes.size(); n-- > 0;) {
    bool any = false;
    for (ValueId out : nodes[n].outputs) any = any || needed_value[out];
    if (!any) continue;
    needed_node[n] = true;
    for (ValueId in : nodes[n].inputs) needed_value[in] = true;
  }
  for (size_t n = 0; n < nodes.size(); ++n)
    if (needed_node[n]) schedule_.push_back(static_cast<int>(n));

  keep_.assign(n_values, false);
  for (ValueId v : wanted_) keep_[v] = true;
  for (const auto& v : graph.values())
    if (v.kind != Value::Kind::activation) keep_[&v - graph.values().data()] = true;

  // Last use of every activation; outputs never read are dead right away.
  std::vector<int> last_use(n_values, -1);
  for (size_t s = 0; s < schedule_.size(); ++s) {
    const Node& node = nodes[schedule_[s]];
    for (ValueId in : node.inputs) last_use[in] = static_cast<int>(s);
    for (ValueId out : node.outputs)
      if (last_use[out] < 0) last_use[out] = static_cast<int>(s);
  }
  frees_.assign(schedule_.size(), {});
  for (size_t v = 0; v < n_values; ++v)
    if (!keep_[v] && last_use[v] >= 0) frees_[last_use[v]].push_back(static_cast<ValueId>(v));
}

std::vector<Tensor> Executor::run(const std::vector<Tensor>& bound, const OpContext& context) {
  const auto& nodes = graph_.nodes();
  std::vector<Tensor> live(graph_.values().size());
  for (size_t v = 0; v < graph_.values().size(); ++v)
    if (graph_.values()[v].kind != Value::Kind::activation && v < bound.size()) live[v] = bound[v];

  MemoryStats at_start = memory_stats();
  reset_peak_memory();
  std::vector<const Tensor*> in_ptrs;
  std::vector<Tensor*> out_ptrs;
  for (size_t s = 0; s < schedule_.size(); ++s) {
    const Node& node = nodes[schedule_[s]];
    in_ptrs.clear();
    out_ptrs.clear();
    for (ValueId in : node.inputs) {
      if (!live[in].defined())
        fail("executor: node '{}' ({}) reads value '{}' which was not bound or computed", node.name,
             node.op(), graph_.value(in).name);
      in_ptrs.push_back(&live[in]);
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      ValueId out = node.outputs[i];
      const TensorSpec& spec = graph_.spec(out);
      if (i == 0 && node.def->output_is_view)
        live[out] = live[node.inputs[0]].reshape(spec.shape);
      else
        live[out] = Tensor::empty(spec.shape, spec.dtype);
      out_ptrs.push_back(&live[out]);
    }
    node.def->forward(context, node.attrs, in_ptrs, out_ptrs);
    for (ValueId dead : frees_[s]) live[dead] = Tensor();
  }
  peak_bytes_ = std::max(memory_stats().peak_bytes, at_start.live_bytes);

  std::vector<Tensor> result;
  for (ValueId v : wanted_) result.push_back(live[v]);
  return result;
}

}  // namespace px
