// defer_updates: P3 (Jayarajan et al. 2019, Strategy::lowering.
// p3_slice_bytes). A step ends as soon as its backward and loss are done;
// the gradient reductions run on into the next step, the first layer's
// first, and each parameter's Update moves to the next step's head, just
// before the first compute that reads the parameter: so the next forward
// starts while later layers' gradients are still on the wire.
//
// A moved Update is `deferred`: its `after` (the reduction of its bucket)
// names an instruction of the previous step. The gradient bucket it reads
// lives across the step boundary, freed after the Update (the frees pass
// takes the step order, program.h). Structure, not an executor rule: the
// simulator replays two steps and sees the same overlap.
#include <algorithm>

#include "parallel/lower/passes.h"

namespace px::parallel::passes {

namespace {

// The first instruction that runs a node reading parameter value `param`
// (list order); the list's end when none does.
size_t first_reader(const Program& p, ValueId param) {
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const auto* compute = std::get_if<Compute>(&p.instrs[i].op);
    if (compute == nullptr) continue;
    const Node& node = p.graph_of(p.instrs[i].micro_batch).nodes()[static_cast<size_t>(compute->node)];
    if (std::find(node.inputs.begin(), node.inputs.end(), param) != node.inputs.end()) return i;
  }
  return p.instrs.size();
}

}  // namespace

void defer_updates(Program& p) {
  if (!p.training || p.strategy.lowering.p3_slice_bytes <= 0) return;
  // Per instruction, the updates that go just before it (in their order).
  std::vector<std::vector<int>> before(p.instrs.size() + 1);
  std::vector<bool> moved(p.instrs.size(), false);
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const auto* update = std::get_if<Update>(&p.instrs[i].op);
    if (update == nullptr) continue;
    before[first_reader(p, p.params[static_cast<size_t>(update->param)].value)].push_back(static_cast<int>(i));
    moved[i] = true;
  }
  // The new list: each moved update before its reader; ids renumbered.
  std::vector<int> order;
  for (size_t i = 0; i <= p.instrs.size(); ++i) {
    for (int u : before[i]) order.push_back(u);
    if (i < p.instrs.size() && !moved[i]) order.push_back(static_cast<int>(i));
  }
  std::vector<int> id(p.instrs.size());
  for (size_t k = 0; k < order.size(); ++k) id[static_cast<size_t>(order[k])] = static_cast<int>(k);
  std::vector<Instr> old = std::move(p.instrs);
  p.instrs.clear();
  for (int from : order) {
    Instr instr = std::move(old[static_cast<size_t>(from)]);
    for (int& dep : instr.after) dep = id[static_cast<size_t>(dep)];
    instr.deferred = moved[static_cast<size_t>(from)];
    p.instrs.push_back(std::move(instr));
  }
}

}  // namespace px::parallel::passes
