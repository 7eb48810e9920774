#include "plan/stage_probe.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <set>
#include <vector>

#include "core/error.h"
#include "graph/precision.h"
#include "parallel/compose.h"
#include "plan/simulate.h"

namespace px::plan {
namespace {

parallel::Strategy probe_strategy(const nn::Model& m, const PlanRequest& request, const ProbeKey& key) {
  return parallel::compose({.tensor_parallel = key.tp,
                            .sequence_parallel = key.sp,
                            .recompute = key.recompute,
                            .precision = request.space.precision},
                           {.graph = &m.graph, .batch_inputs = request.batch_inputs, .ranks = key.tp});
}

// The parts of a two-block probe from its replay's trace (rank 0 of the
// tensor group). A value crossing a cut counts in the dtype the pipeline
// sends it in (bf16 where only bf16 readers read it), its gradient in
// float32 (gradients sent back stay fp32).
void attribute(const parallel::Program& program, const Simulation& sim, ProbeCosts& costs) {
  const Graph& g = program.graphs.front();
  int first_block = std::numeric_limits<int>::max();
  for (size_t k = 0; k < g.nodes().size(); ++k)
    if (block_of(g.nodes()[k].name) >= 0) first_block = std::min(first_block, static_cast<int>(k));
  // Part of a forward node: -1 pre, 0/1 the blocks, 2 post.
  auto part_of = [&](int node) {
    const Node& n = g.nodes()[static_cast<size_t>(node)];
    const int origin = n.origin >= 0 ? n.origin : node;
    const int block = block_of(g.nodes()[static_cast<size_t>(origin)].name);
    return block >= 0 ? block : origin < first_block ? -1 : 2;
  };
  ProbePart parts[4];
  auto at = [&](int part) -> ProbePart& { return parts[part + 1]; };
  // Backward nodes no other node reads: weight gradients (zb-h1 defers them as W).
  std::vector<bool> read(g.values().size(), false);
  for (const Node& n : g.nodes())
    for (ValueId v : n.inputs) read[static_cast<size_t>(v)] = true;
  auto weight_leaf = [&](int node) {
    const Node& n = g.nodes()[static_cast<size_t>(node)];
    if (n.origin < 0) return false;
    for (ValueId v : n.outputs)
      if (read[static_cast<size_t>(v)]) return false;
    return true;
  };
  for (const SimulatedEvent& e : sim.trace) {
    const parallel::Instr& instr = program.instrs[static_cast<size_t>(e.instr)];
    int node = -1;
    if (const auto* c = std::get_if<parallel::Compute>(&instr.op)) node = c->node;
    if (const auto* r = std::get_if<parallel::Reshard>(&instr.op)) node = r->node;
    if (const auto* r = std::get_if<parallel::Route>(&instr.op)) node = r->node;
    if (node < 0) continue;
    const bool backward = g.nodes()[static_cast<size_t>(node)].origin >= 0;
    (backward ? at(part_of(node)).backward : at(part_of(node)).forward) += e.duration;
    if (weight_leaf(node)) at(part_of(node)).weight += e.duration;
  }
  // Parameters: counted in every part that reads them (the tied embedding is pre's and post's).
  for (const parallel::ParamLayout& p : program.params) {
    std::set<int> readers;
    for (size_t k = 0; k < g.nodes().size(); ++k) {
      const Node& n = g.nodes()[k];
      if (n.origin < 0 && std::find(n.inputs.begin(), n.inputs.end(), p.value) != n.inputs.end())
        readers.insert(part_of(static_cast<int>(k)));
    }
    for (int part : readers) at(part).params += static_cast<double>(p.shape.numel());
    if (readers.count(-1) && readers.count(2)) costs.shared_params += static_cast<double>(p.shape.numel());
  }
  costs.pre = at(-1);
  costs.post = at(2);
  costs.block = {.forward = (at(0).forward + at(1).forward) / 2,
                 .backward = (at(0).backward + at(1).backward) / 2,
                 .weight = (at(0).weight + at(1).weight) / 2,
                 .params = at(1).params};
  // What h.1 reads of h.0's forward values: a stage cut's message, in the
  // dtype the Program's Send gives it (bf16 for a float32 value every
  // reader past the cut takes at bf16 precision, graph/precision.h's
  // reads_at_bf16), and its gradient coming back in float32.
  std::set<ValueId> crossing;
  for (const Node& n : g.nodes()) {
    if (n.origin >= 0 || block_of(n.name) != 1) continue;
    for (ValueId v : n.inputs) {
      const int producer = g.value(v).producer;
      if (producer >= 0 && block_of(g.nodes()[static_cast<size_t>(producer)].name) == 0) crossing.insert(v);
    }
  }
  std::set<ValueId> outputs;
  for (const auto& [name, v] : g.outputs()) outputs.insert(v);
  for (ValueId v : crossing) {
    bool at_bf16 = g.spec(v).dtype == DType::f32 && outputs.count(v) == 0;
    for (size_t k = 0; k < g.nodes().size() && at_bf16; ++k) {
      const Node& n = g.nodes()[k];
      if (part_of(static_cast<int>(k)) == 0) continue;  // read where it is made
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (n.inputs[i] == v && !reads_at_bf16(n, i)) at_bf16 = false;
    }
    const DType sent = at_bf16 ? DType::bf16 : g.spec(v).dtype;
    const auto elements = static_cast<double>(g.spec(v).shape.numel());
    costs.boundary += elements * static_cast<double>(dtype_size(sent));
    if (g.spec(v).dtype == DType::f32 || g.spec(v).dtype == DType::bf16)
      costs.boundary_gradient += elements * static_cast<double>(dtype_size(DType::f32));
  }
}

}  // namespace

// "h.<i>..." -> i, else -1.
int block_of(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return -1;
  const size_t dot = name.find('.', 2);
  try {
    return std::stoi(name.substr(2, dot == std::string::npos ? std::string::npos : dot - 2));
  } catch (const std::exception&) {
    return -1;
  }
}

int block_count(const Graph& graph) {
  int blocks = 0;
  for (const Node& n : graph.nodes()) blocks = std::max(blocks, block_of(n.name) + 1);
  return blocks;
}

ProbeCosts probe(const PlanRequest& request, const CostEstimator& estimator, const ProbeKey& key,
                 const Deadline& deadline) {
  ProbeCosts costs;
  double activation[3] = {0, 0, 0}, stash[3] = {0, 0, 0}, flops[3] = {0, 0, 0}, instrs[3] = {0, 0, 0};
  double lowering = 0;  // seconds lowering and replaying (what a verification costs an instruction)
  for (int layers : {1, 2}) {
    const nn::Model m = request.build(key.rows, layers);
    const auto start = std::chrono::steady_clock::now();
    std::vector<parallel::Program> programs;
    try {
      programs = lower_representatives({.forward = &m.graph, .loss = m.loss}, probe_strategy(m, request, key),
                                       &deadline);
    } catch (const Error& e) {
      costs.error = e.what();
      return costs;
    }
    const Simulation sim = simulate({.programs = &programs,
                                     .cluster = request.cluster,
                                     .estimator = &estimator,
                                     .execution = {.overlap = request.overlap, .trace = layers == 2},
                                     .optimizer_slots = request.optimizer_slots,
                                     .deadline = &deadline});
    activation[layers] = sim.activation_peak_bytes.front();
    stash[layers] = sim.stash_bytes.front();
    flops[layers] = sim.flops;
    instrs[layers] = static_cast<double>(programs.front().instrs.size());
    lowering += seconds_since(start);
    if (layers == 2) attribute(programs.front(), sim, costs);
  }
  costs.block_stash = std::max(0.0, stash[2] - stash[1]);
  costs.post_stash = std::max(0.0, stash[1] - costs.block_stash - costs.boundary);
  costs.transient = std::max(0.0, activation[1] - stash[1]);
  costs.block_flops = flops[2] - flops[1];
  costs.base_flops = flops[1] - costs.block_flops;
  costs.block_instrs = instrs[2] - instrs[1];
  costs.base_instrs = instrs[1] - costs.block_instrs;
  costs.seconds_per_instr = lowering / (instrs[1] + instrs[2]);
  return costs;
}

}  // namespace px::plan
