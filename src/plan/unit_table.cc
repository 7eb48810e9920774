#include "plan/unit_table.h"

#include <map>

#include "graph/precision.h"
#include "parallel/compose.h"
#include "parallel/lower.h"

namespace px::plan {

UnitTable unit_table(const nn::Model& model, int dp, const std::vector<std::string>& batch_inputs,
                     Precision precision) {
  // Lowered fp32: the units are found by structure (parallel::split_units),
  // which bf16 storage's casts between GEMMs would hide. Its nodes then
  // take the plan's precision, so a GEMM costs what the bf16 Program's does.
  UnitTable table{.program = parallel::lower({.forward = &model.graph, .loss = model.loss},
                                             parallel::data_parallel(dp, batch_inputs), 0)};
  for (Graph& graph : table.program.graphs) set_precision(graph, precision);
  const Graph& g = table.graph();
  std::vector<int> owner(g.nodes().size(), -1);
  std::map<std::string, size_t> param_owner;
  for (parallel::SplitUnit& split : parallel::split_units(g)) {
    for (int n : split.nodes) owner[static_cast<size_t>(n)] = static_cast<int>(table.units.size());
    for (const parallel::GemmLayer& l : split.layers) {
      param_owner[l.weight] = table.units.size();
      if (!l.bias.empty()) param_owner[l.bias] = table.units.size();
    }
    LayerUnit unit{.split = std::move(split)};
    const parallel::GemmLayer &first = unit.split.layers.front(), &last = unit.split.layers.back();
    unit.output_bytes = static_cast<double>(g.spec(last.output).shape.numel()) * 4;
    unit.input_bytes = unit.block() ? unit.output_bytes : static_cast<double>(g.spec(first.input).shape.numel()) * 4;
    table.units.push_back(std::move(unit));
  }
  for (const parallel::Instr& instr : table.program.instrs) {
    const auto* c = std::get_if<parallel::Compute>(&instr.op);
    if (!c || instr.micro_batch != 0) continue;
    const Node& n = g.nodes()[static_cast<size_t>(c->node)];
    const bool backward = n.origin >= 0;
    const int u = owner[static_cast<size_t>(backward ? n.origin : c->node)];
    if (u < 0) (backward ? table.rest_backward : table.rest_forward).push_back(c->node);
    else (backward ? table.units[static_cast<size_t>(u)].backward : table.units[static_cast<size_t>(u)].forward).push_back(c->node);
  }
  for (const parallel::ParamLayout& param : table.program.params) {
    if (auto it = param_owner.find(param.name); it != param_owner.end())
      table.units[it->second].params += static_cast<double>(param.global_shape.numel());
    else
      table.rest_params += static_cast<double>(param.global_shape.numel());
  }
  return table;
}

parallel::Strategy placement_strategy(const std::vector<std::string>& batch_inputs, Precision precision, int dp, int tp,
                                      const std::vector<LayerUnit>& units,
                                      const std::vector<LayerPlacement>& placements) {
  parallel::Strategy s = parallel::data_tensor_mesh(dp, tp, batch_inputs);
  s.precision = precision;
  for (size_t i = 0; i < units.size(); ++i) seed_layer(s, units[i].split, placements[i]);
  return s;
}

}  // namespace px::plan
