// plan_work: which nodes this rank runs, in which order.
//
// Without a pipeline: per micro-batch, every node the loss, the outputs and
// the gradients need, forward then backward.
//
// With one (Strategy::pipeline over an axis of P > 1 ranks): the forward
// nodes are cut into P·V virtual stages (lower/stages.h: balanced by cost
// among the narrowest cuts, or before the layers --stage-cuts names), a
// backward node runs on its forward origin's stage, and this rank runs its
// chunks' nodes in the order of its action list in the schedule
// (parallel/pipeline_schedule.h), which was checked for deadlock first:
//
//   forward F(m, c)           stage c·P + r's forward nodes of micro-batch m
//   backward B(m, c)          its backward nodes; zero-bubble splits them into
//                             B (what the input gradients need) and W (nodes
//                             that feed only weight gradients)
//   send/recv activation      the forward values read on a later stage
//   send/recv gradient        the backward values read on an earlier stage
//
// A value read more than one stage later is relayed by the stages between.
// Under bf16 mixed precision a float32 value that every reader on the later
// stages takes at bf16 precision (a GEMM's operand, graph/precision.h) is
// sent in bf16 (Send::dtype): half the bytes, and the readers round it
// anyway, so results do not change. A cast to bf16 stays on its producer's
// stage, so a value stored in bf16 crosses as the bf16 copy.
// A parameter read on two stages (GPT's tied wte: the embedding on the first,
// the LM head on the last) is held by both; each accumulates the summands of
// its gradient made on its own stages, and the stages sum them (a
// collective over just those pipeline ranks) before the update.
#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "graph/precision.h"
#include "parallel/lower/passes.h"
#include "parallel/lower/stages.h"

namespace px::parallel::passes {
namespace {

// Nodes the wanted values need, in graph order.
std::vector<int> needed_nodes(const Graph& graph, const std::vector<ValueId>& wanted) {
  std::vector<bool> value(graph.values().size(), false);
  for (ValueId v : wanted) value[static_cast<size_t>(v)] = true;
  std::vector<int> order;
  for (size_t n = graph.nodes().size(); n-- > 0;) {
    const Node& node = graph.nodes()[n];
    bool any = false;
    for (ValueId out : node.outputs) any = any || value[static_cast<size_t>(out)];
    if (!any) continue;
    order.push_back(static_cast<int>(n));
    for (ValueId in : node.inputs) value[static_cast<size_t>(in)] = true;
  }
  std::reverse(order.begin(), order.end());
  return order;
}

// The summands autodiff added up into gradient `g` ("<value>.grad_sum" adds).
void summands(const Graph& graph, ValueId g, std::vector<ValueId>& out) {
  const Value& value = graph.value(g);
  if (value.producer >= 0) {
    const Node& node = graph.nodes()[static_cast<size_t>(value.producer)];
    const std::string suffix = ".grad_sum";
    if (node.op() == "add" && node.name.size() > suffix.size() &&
        node.name.compare(node.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      for (ValueId in : node.inputs) summands(graph, in, out);
      return;
    }
  }
  out.push_back(g);
}

std::string stage_layers(const Graph& graph, int first, int end) {
  auto name = [&](int n) {
    const Node& node = graph.nodes()[static_cast<size_t>(n)];
    return node.name.empty() ? fmt::format("node {} ({})", n, node.op()) : node.name;
  };
  return fmt::format("{} .. {}", name(first), name(end - 1));
}

RankWork without_pipeline(const Context& c, const Program& p) {
  RankWork work;
  std::vector<ValueId> wanted;
  if (c.loss != kNoValue) wanted.push_back(c.loss);
  for (ValueId v : p.outputs) wanted.push_back(v);
  for (size_t i = 0; i < c.grads.size(); ++i)
    if (c.grads[i].grad != kNoValue) {
      wanted.push_back(c.grads[i].grad);
      work.gradient_parts.push_back({c.grads[i].grad, static_cast<int>(i)});
    }
  const std::vector<int> nodes = needed_nodes(c.graph, wanted);
  std::vector<int> forward, backward;
  for (int n : nodes) (n < c.forward_nodes ? forward : backward).push_back(n);
  // Expert parallelism's exchanges overlap compute when two micro-batches
  // run interleaved (LoweringOptions::overlap_expert_exchanges): m's rows
  // travel to their experts while m + 1's attention runs, and back while
  // m + 1's experts run. Not under ZeRO-2/3,
  // whose buckets and gathers are per micro-batch (one micro-batch's
  // gradient parts must be complete before the next one's start).
  const int M = c.strategy.micro_batches;
  const bool pairs = c.strategy.lowering.overlap_expert_exchanges && c.expert_axis >= 0 && M >= 2 && c.zero_stage <= 1;
  for (int m = 0; m < M; m += pairs ? 2 : 1) {
    const int together = pairs && m + 1 < M ? 2 : 1;
    for (int k = 0; k < together; ++k)
      work.phases.push_back({.kind = Phase::Kind::compute, .micro = m + k, .backward = false, .nodes = forward,
                             .interleaved_with_next = k + 1 < together});
    if (backward.empty()) continue;
    for (int k = 0; k < together; ++k)
      work.phases.push_back({.kind = Phase::Kind::compute, .micro = m + k, .backward = true, .nodes = backward,
                             .interleaved_with_next = k + 1 < together});
  }
  work.holds.assign(c.graph.values().size(), false);
  for (const ParamGrad& pg : c.grads) work.holds[static_cast<size_t>(pg.param)] = true;
  return work;
}

// A stage that would start at a cast to bf16 (graph/precision.h's storage
// rewrite puts one right after its value's producer) starts after it: the
// cast stays with its producer, and the bf16 copy is what crosses.
std::vector<int> casts_with_producers(const Graph& graph, int forward_nodes, std::vector<int> starts) {
  for (size_t s = 1; s < starts.size(); ++s)
    while (starts[s] + 1 < forward_nodes && graph.nodes()[static_cast<size_t>(starts[s])].op() == "to_bf16") ++starts[s];
  return starts;
}

// Where each virtual stage starts: balanced by cost, or at the layers
// --stage-cuts names.
std::vector<int> stage_starts_of(const Context& c, int ranks, int virtual_stages) {
  const PipelineOptions& options = c.strategy.pipeline;
  const int stages = ranks * virtual_stages;
  if (options.stage_cuts.empty())
    return casts_with_producers(c.graph, c.forward_nodes, balanced_stage_starts(c.graph, c.forward_nodes, stages));
  if (static_cast<int>(options.stage_cuts.size()) != stages - 1)
    fail("--stage-cuts names {} layers ({}); {} pipeline ranks x {} chunks need {} cuts", options.stage_cuts.size(),
         fmt::join(options.stage_cuts, ","), ranks, virtual_stages, stages - 1);
  return casts_with_producers(c.graph, c.forward_nodes, stage_starts_at(c.graph, c.forward_nodes, options.stage_cuts));
}

// Per value: the dtype it crosses a cut in. Its own, or bf16 for a float32
// value every reader of which on a stage other than its producer's takes it
// at bf16 precision (a node stamped bf16, at a position in its op's
// bf16_inputs); graph outputs travel as they are.
std::vector<DType> transfer_dtypes(const Graph& graph, const std::vector<int>& stage_of, const std::vector<int>& nodes,
                                   const StageCrossings& crossings) {
  std::vector<bool> at_bf16(graph.values().size(), true);
  for (int n : nodes) {
    const Node& node = graph.nodes()[static_cast<size_t>(n)];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const Value& value = graph.value(node.inputs[i]);
      if (value.producer < 0 || stage_of[static_cast<size_t>(value.producer)] == stage_of[static_cast<size_t>(n)])
        continue;  // read where it is made
      if (!reads_at_bf16(node, i)) at_bf16[static_cast<size_t>(node.inputs[i])] = false;
    }
  }
  for (const auto& [name, v] : graph.outputs()) at_bf16[static_cast<size_t>(v)] = false;
  std::vector<DType> dtype(graph.values().size());
  for (size_t v = 0; v < dtype.size(); ++v) dtype[v] = graph.values()[v].spec.dtype;
  for (const std::vector<ValueId>& cut : crossings.forward)
    for (ValueId v : cut)
      if (at_bf16[static_cast<size_t>(v)] && dtype[static_cast<size_t>(v)] == DType::f32)
        dtype[static_cast<size_t>(v)] = DType::bf16;
  return dtype;
}

// Gradients: whole where one stage makes them, else each stage's summands
// (a parameter two stages share). `parts` gets (value, index into
// Context::grads) for every stage's; the values are also `wanted`.
void gradient_terms(const Context& c, const StageAssignment& assignment, std::vector<ValueId>& wanted,
                    std::vector<std::pair<ValueId, int>>& parts) {
  std::set<ValueId> shared_params;
  for (const auto& [param, on] : assignment.shared_params) shared_params.insert(param);
  for (size_t i = 0; i < c.grads.size(); ++i) {
    const ParamGrad& pg = c.grads[i];
    if (pg.grad == kNoValue) continue;
    std::vector<ValueId> terms;
    if (shared_params.count(pg.param)) summands(c.graph, pg.grad, terms);
    else terms.push_back(pg.grad);
    for (ValueId t : terms) {
      wanted.push_back(t);
      parts.push_back({t, static_cast<int>(i)});
    }
  }
}

// Message tags: unique per micro-batch, cut, direction and value within a step.
class MessageTags {
 public:
  MessageTags(const StageCrossings& crossings, int micro_batches, int stages) : stages_(stages) {
    for (int k = 0; k + 1 < stages; ++k) {
      if (crossings.forward[static_cast<size_t>(k)].empty())
        fail("pipeline: nothing crosses from stage {} to stage {}: the stages are not a chain", k, k + 1);
      width_ = std::max({width_, crossings.forward[static_cast<size_t>(k)].size(),
                         crossings.backward[static_cast<size_t>(k)].size()});
    }
    const uint64_t count = static_cast<uint64_t>(micro_batches) * static_cast<uint64_t>(stages) * 2 * width_;
    if (count >= (1u << 20))
      fail("pipeline: {} micro-batches x {} stages x {} values a cut need more message tags than the {} available",
           micro_batches, stages, width_, 1u << 20);
  }
  // The tags of `count` values crossing `cut` for micro-batch m (direction 0 forward, 1 backward).
  std::vector<uint32_t> of(int m, int cut, int direction, size_t count) const {
    std::vector<uint32_t> tags;
    for (size_t i = 0; i < count; ++i)
      tags.push_back(static_cast<uint32_t>(((static_cast<uint64_t>(m) * static_cast<uint64_t>(stages_ - 1) +
                                             static_cast<uint64_t>(cut)) * 2 + static_cast<uint64_t>(direction)) *
                                               width_ + i));
    return tags;
  }

 private:
  int stages_;
  size_t width_ = 1;
};

struct StageNodes {
  std::vector<int> forward, backward, input_grad, weight_grad;
};

// Per stage: forward nodes, backward nodes, and the backward split into
// B (feeding an input gradient) and W (feeding only weight gradients).
std::vector<StageNodes> nodes_by_stage(const Context& c, const std::vector<int>& nodes,
                                       const std::vector<std::pair<ValueId, int>>& parts,
                                       const StageCrossings& crossings, const std::vector<int>& stage_of, int stages) {
  const Graph& graph = c.graph;
  std::vector<bool> is_part(graph.values().size(), false);
  for (const auto& [v, i] : parts) is_part[static_cast<size_t>(v)] = true;
  std::vector<bool> sent_back(graph.values().size(), false);
  for (const auto& cut : crossings.backward)
    for (ValueId v : cut) sent_back[static_cast<size_t>(v)] = true;
  std::vector<std::vector<int>> readers(graph.values().size());
  for (int n : nodes)
    for (ValueId v : graph.nodes()[static_cast<size_t>(n)].inputs) readers[static_cast<size_t>(v)].push_back(n);
  std::vector<bool> weight_only(graph.nodes().size(), false);
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const int n = *it;
    if (n < c.forward_nodes) continue;
    bool only = true;
    for (ValueId out : graph.nodes()[static_cast<size_t>(n)].outputs) {
      if (is_part[static_cast<size_t>(out)]) continue;
      if (sent_back[static_cast<size_t>(out)] || out == c.loss) only = false;
      for (int r : readers[static_cast<size_t>(out)]) only = only && weight_only[static_cast<size_t>(r)];
    }
    weight_only[static_cast<size_t>(n)] = only;
  }
  std::vector<StageNodes> of_stage(static_cast<size_t>(stages));
  for (int n : nodes) {
    StageNodes& s = of_stage[static_cast<size_t>(stage_of[static_cast<size_t>(n)])];
    if (n < c.forward_nodes) {
      s.forward.push_back(n);
      continue;
    }
    s.backward.push_back(n);
    (weight_only[static_cast<size_t>(n)] ? s.weight_grad : s.input_grad).push_back(n);
  }
  return of_stage;
}

// This rank's action list as phases: its chunks' nodes and the transfers
// between stages.
std::vector<Phase> phases_of(const PipelineSchedule& schedule, int me, const std::vector<StageNodes>& of_stage,
                             const StageCrossings& crossings, const MessageTags& tags) {
  std::vector<Phase> phases;
  for (const PipelineAction& a : schedule.ranks[static_cast<size_t>(me)]) {
    const int stage = schedule.virtual_stage(me, a.chunk);
    const StageNodes& s = of_stage[static_cast<size_t>(stage)];
    Phase phase{.kind = Phase::Kind::compute, .micro = a.micro, .peer = a.peer};
    phase.backward = a.op == PipelineOp::backward || a.op == PipelineOp::backward_input ||
                     a.op == PipelineOp::backward_weight;
    switch (a.op) {
      case PipelineOp::forward: phase.nodes = s.forward; break;
      case PipelineOp::backward: phase.nodes = s.backward; break;
      case PipelineOp::backward_input: phase.nodes = s.input_grad; break;
      case PipelineOp::backward_weight: phase.nodes = s.weight_grad; break;
      case PipelineOp::send_activation:
      case PipelineOp::recv_activation: {
        const int cut = a.op == PipelineOp::send_activation ? stage : stage - 1;
        phase.kind = a.op == PipelineOp::send_activation ? Phase::Kind::send : Phase::Kind::recv;
        phase.values = crossings.forward[static_cast<size_t>(cut)];
        phase.tags = tags.of(a.micro, cut, 0, phase.values.size());
        break;
      }
      case PipelineOp::send_gradient:
      case PipelineOp::recv_gradient: {
        const int cut = a.op == PipelineOp::send_gradient ? stage - 1 : stage;
        phase.kind = a.op == PipelineOp::send_gradient ? Phase::Kind::send : Phase::Kind::recv;
        phase.values = crossings.backward[static_cast<size_t>(cut)];
        phase.tags = tags.of(a.micro, cut, 1, phase.values.size());
        break;
      }
      case PipelineOp::reduce_gradients: continue;  // each bucket's reduction follows its last gradient
    }
    if (phase.kind != Phase::Kind::compute && phase.values.empty()) continue;
    phases.push_back(std::move(phase));
  }
  return phases;
}

}  // namespace

RankWork plan_work(const Context& c, Program& p) {
  const int ranks = c.strategy.pipeline_ranks();
  if (ranks == 1) return without_pipeline(c, p);
  if (!p.training) fail("pipeline stages run training steps; evaluation runs on one rank");
  const Graph& graph = c.graph;
  const PipelineOptions& options = c.strategy.pipeline;
  const int axis = c.strategy.mesh.axis(options.axis);
  const int me = c.coords[static_cast<size_t>(axis)];
  const int M = c.strategy.micro_batches;
  const PipelineSchedule schedule = make_pipeline_schedule(options.schedule, ranks, M, options.virtual_stages);
  const int stages = ranks * schedule.virtual_stages;
  auto rank_of_stage = [&](int s) { return s % ranks; };

  const std::vector<int> starts = stage_starts_of(c, ranks, schedule.virtual_stages);
  const StageAssignment assignment = assign_stages(graph, c.forward_nodes, starts);
  const std::vector<int>& stage_of = assignment.stage_of_node;
  std::vector<ValueId> wanted;
  if (c.loss != kNoValue) wanted.push_back(c.loss);
  for (ValueId v : p.outputs) wanted.push_back(v);  // each computed on its producer's stage
  std::vector<std::pair<ValueId, int>> parts;  // every stage's
  gradient_terms(c, assignment, wanted, parts);
  const std::vector<int> nodes = needed_nodes(graph, wanted);
  // Values crossing each cut: forward values read later, backward values read earlier.
  const StageCrossings crossings = stage_crossings(graph, c.forward_nodes, stage_of, stages, nodes);
  const MessageTags tags(crossings, M, stages);

  RankWork work;
  work.pipeline_axis = axis;
  work.transfer_dtype = transfer_dtypes(graph, stage_of, nodes, crossings);
  work.phases = phases_of(schedule, me, nodes_by_stage(c, nodes, parts, crossings, stage_of, stages), crossings, tags);

  // What this rank holds and accumulates.
  std::set<int> mine;
  for (int chunk = 0; chunk < schedule.virtual_stages; ++chunk) mine.insert(schedule.virtual_stage(me, chunk));
  work.holds.assign(graph.values().size(), false);
  std::map<ValueId, std::set<int>> holders;  // parameter -> pipeline coordinates reading it
  for (int n : nodes)
    for (ValueId v : graph.nodes()[static_cast<size_t>(n)].inputs)
      if (graph.value(v).kind == Value::Kind::param) {
        holders[v].insert(rank_of_stage(stage_of[static_cast<size_t>(n)]));
        if (mine.count(stage_of[static_cast<size_t>(n)])) work.holds[static_cast<size_t>(v)] = true;
      }
  for (const auto& [v, i] : parts)
    if (mine.count(stage_of[static_cast<size_t>(graph.value(v).producer)])) work.gradient_parts.push_back({v, i});
  // Every rank lists the same subgroups, in parameter order.
  for (const ParamGrad& pg : c.grads) {
    const std::set<int>& on = holders[pg.param];
    if (on.size() < 2 || pg.grad == kNoValue) continue;
    if (on.count(me)) work.shared.push_back({pg.param, static_cast<int>(p.subgroups.size())});
    p.subgroups.push_back({axis, std::vector<int>(on.begin(), on.end())});
  }

  PipelineLayout& layout = p.pipeline;
  layout.axis = axis;
  layout.schedule = schedule;
  layout.stage_starts = starts;
  layout.stage_cost = assignment.cost;
  for (int s = 0; s < stages; ++s)
    layout.stage_layers.push_back(
        stage_layers(graph, starts[static_cast<size_t>(s)],
                     s + 1 < stages ? starts[static_cast<size_t>(s) + 1] : c.forward_nodes));
  for (ValueId v : graph.params()) {
    const std::set<int>& on = holders[v];
    layout.params.push_back({graph.value(v).name, graph.spec(v).shape, on.empty() ? 0 : *on.begin()});
  }
  return work;
}

}  // namespace px::parallel::passes
