#include "parallel/program.h"

#include <fmt/format.h>

#include "comm/collectives.h"
#include "comm/reduction.h"
#include "core/error.h"
#include "parallel/lower/reshard.h"

namespace px::parallel {

std::string describe_pipeline(const PipelineLayout& pipeline) {
  const PipelineSchedule& s = pipeline.schedule;
  const double bubble = simulate_pipeline(s).bubble_fraction();
  std::string out = fmt::format(
      "pipeline schedule {}: {} stages, {} micro-batches, {} chunk{} a stage; analytical bubble {:.1f}% "
      "((P-1)/(M+P-1) = {:.1f}%)\n",
      pipeline_kind_name(s.kind), s.stages, s.micro_batches, s.virtual_stages, s.virtual_stages == 1 ? "" : "s",
      100 * bubble, 100.0 * (s.stages - 1) / (s.micro_batches + s.stages - 1));
  double total = 0;
  for (double c : pipeline.stage_cost) total += c;
  for (size_t v = 0; v < pipeline.stage_layers.size(); ++v)
    out += fmt::format("  virtual stage {} on pipeline rank {}: {} ({:.1f}% of the cost)\n", v,
                       static_cast<int>(v) % s.stages, pipeline.stage_layers[v],
                       total > 0 ? 100 * pipeline.stage_cost[v] / total : 0.0);
  return out + draw_pipeline(s);
}

std::string_view buffer_kind_name(Buffer::Kind kind) {
  switch (kind) {
    case Buffer::Kind::params: return "params";
    case Buffer::Kind::param_shard: return "param_shard";
    case Buffer::Kind::param_bucket: return "param_bucket";
    case Buffer::Kind::grad_bucket: return "grad_bucket";
    case Buffer::Kind::grad_shard: return "grad_shard";
    case Buffer::Kind::loss: return "loss";
    case Buffer::Kind::norm: return "norm";
    case Buffer::Kind::flags: return "flags";
  }
  return "?";
}

std::string lane_name(const Program& p, const Lane& lane) {
  if (lane.kind == Lane::Kind::compute) return "compute";
  const auto& axes = p.strategy.mesh.axes();
  const std::string axis =
      lane.axis >= 0 && lane.axis < static_cast<int>(axes.size()) ? axes[static_cast<size_t>(lane.axis)].name : "?";
  return fmt::format("{}:{}", lane.kind == Lane::Kind::progress ? "progress" : "p2p", axis);
}

Region Program::param_source(int param) const {
  const ParamLayout& p = params.at(static_cast<size_t>(param));
  const int64_t count = p.shape.numel();
  if (params_buffer >= 0) return {params_buffer, p.offset, count};
  const BucketLayout& b = buckets.at(static_cast<size_t>(p.bucket));
  PX_CHECK_GE(b.param_buffer, 0);
  return {b.param_buffer, p.offset - b.offset, count};
}

namespace {

std::string region_str(const Program& p, const Region& r) {
  if (r.buffer < 0) return "-";
  return fmt::format("{}[{}:{}]", p.buffers.at(static_cast<size_t>(r.buffer)).name, r.offset, r.offset + r.count);
}

// " seq 3 wire 1536" for what talks to a group: its call and its bytes;
// on a progress lane, its slices and the engine's agreement rounds.
std::string facts_str(const Instr& instr) {
  std::string s;
  if (instr.group >= 0) s += fmt::format(" seq {}", instr.sequence);
  if (instr.algorithm != comm::Algorithm::automatic) s += fmt::format(" by {}", comm::algorithm_name(instr.algorithm));
  if (instr.wire.inter_node > 0)
    s += fmt::format(" wire {}+{} across nodes", instr.wire.intra_node, instr.wire.inter_node);
  else if (instr.wire.intra_node > 0)
    s += fmt::format(" wire {}", instr.wire.intra_node);
  if (instr.slices > 1) s += fmt::format(" in {} slices", instr.slices);
  if (instr.announcement_rounds > 0)
    s += fmt::format(" {} announcement round{}", instr.announcement_rounds, instr.announcement_rounds == 1 ? "" : "s");
  return s;
}

std::string axis_str(const Program& p, int axis) {
  if (axis < 0) return "-";
  return p.strategy.mesh.axes().at(static_cast<size_t>(axis)).name;
}

struct OperationPrinter {
  const Program& p;
  const Instr& instr;
  std::string operator()(const Compute& c) const {
    const Graph& g = p.graph_of(instr.micro_batch);
    const Node& node = g.nodes().at(static_cast<size_t>(c.node));
    std::string shapes;
    for (ValueId out : node.outputs) shapes += (shapes.empty() ? "" : ", ") + g.spec(out).str();
    return fmt::format("{} ({}) -> {}", node.name, node.op(), shapes);
  }
  std::string operator()(const Collective& c) const {
    const bool reduces = c.kind == comm::Collective::allreduce || c.kind == comm::Collective::reduce_scatter;
    std::string s = fmt::format("{} {}{} {}", comm::collective_name(c.kind), axis_str(p, c.axis),
                                reduces ? fmt::format(" {}", comm::reduction_name(c.op)) : "", region_str(p, c.input));
    if (c.output.buffer >= 0) s += fmt::format(" -> {}{}", region_str(p, c.output), c.accumulate ? " (add)" : "");
    if (c.codec.lossy()) s += fmt::format(" codec {} ({}x{})", c.codec.to_string(), c.codec_rows, c.codec_cols);
    if (c.momentum != 0) s += fmt::format(" momentum {}", c.momentum);
    if (c.agreement.buffer >= 0) s += fmt::format(" if {} clear", region_str(p, c.agreement));
    if (c.subgroup >= 0)
      s += fmt::format(" among [{}]", fmt::join(p.subgroups.at(static_cast<size_t>(c.subgroup)).coords, ","));
    if (c.slice_bytes > 0) s += fmt::format(" in slices of {} B", c.slice_bytes);
    return s;
  }
  std::string operator()(const Reshard& r) const {
    const Graph& g = p.graph_of(instr.micro_batch);
    const Node& node = g.nodes().at(static_cast<size_t>(r.node));
    return fmt::format("reshard {} {} -> {} ({}) {} -> {}", axis_str(p, r.axis), r.from.str(), r.to.str(),
                       resharding_name(resharding(r.from, r.to)), g.value(node.inputs.front()).name,
                       g.spec(node.outputs.front()).str());
  }
  std::string operator()(const Route& r) const {
    const Graph& g = p.graph_of(instr.micro_batch);
    const Node& node = g.nodes().at(static_cast<size_t>(r.node));
    const bool out = node.op() == "moe_dispatch";
    return fmt::format("route {} {} {} {} -> {}", axis_str(p, r.axis), out ? "to experts" : "back to tokens",
                       node.name, g.spec(node.inputs.front()).str(), g.spec(node.outputs.front()).str());
  }
  std::string operator()(const Send& s) const {
    const Graph& g = p.graph_of(instr.micro_batch);
    return fmt::format("send {} {}{} to {}:{} tag {}", g.value(s.value).name, g.spec(s.value).str(),
                       s.dtype == g.spec(s.value).dtype ? "" : fmt::format(" as {}", dtype_name(s.dtype)),
                       axis_str(p, s.axis), s.peer, s.tag);
  }
  std::string operator()(const Recv& r) const {
    const Graph& g = p.graph_of(instr.micro_batch);
    return fmt::format("recv {} {} from {}:{} tag {}", g.value(r.value).name, g.spec(r.value).str(),
                       axis_str(p, r.axis), r.peer, r.tag);
  }
  std::string operator()(const Accumulate& a) const {
    const Graph& g = p.graph_of(instr.micro_batch);
    return fmt::format("accumulate {} -> {}", g.value(a.from).name, region_str(p, a.into));
  }
  std::string operator()(const Norm& n) const {
    std::string s = "norm";
    for (size_t i = 0; i < n.gradients.size(); ++i)
      s += " " + region_str(p, n.gradients[i]) +
           (i < n.weights.size() && n.weights[i] != 1 ? fmt::format("x{:.4g}", n.weights[i]) : "");
    return s + " -> " + region_str(p, n.into);
  }
  std::string operator()(const Finite& f) const {
    return fmt::format("finite {} -> {}", region_str(p, f.gradient), region_str(p, f.into));
  }
  std::string operator()(const Clip& c) const {
    std::string s = "clip";
    for (const Region& r : c.gradients) s += " " + region_str(p, r);
    return s + " to " + region_str(p, c.norm);
  }
  std::string operator()(const Update& u) const {
    const ParamLayout& param = p.params.at(static_cast<size_t>(u.param));
    return fmt::format("update {}[{}:{}] grad {} param {}", param.name, u.offset, u.offset + u.count,
                       region_str(p, u.gradient), region_str(p, u.storage));
  }
  std::string operator()(const Free& f) const {
    return fmt::format("free {}", p.buffers.at(static_cast<size_t>(f.buffer)).name);
  }
};

}  // namespace

std::vector<int> step_order(const std::vector<Instr>& instrs) {
  std::vector<int> order;
  order.reserve(instrs.size());
  for (bool deferred : {false, true})
    for (size_t i = 0; i < instrs.size(); ++i)
      if (instrs[i].deferred == deferred) order.push_back(static_cast<int>(i));
  return order;
}

std::vector<bool> carried_instructions(const std::vector<Instr>& instrs) {
  std::vector<bool> carried(instrs.size(), false);
  for (const Instr& instr : instrs)
    if (instr.deferred)
      for (int dep : instr.after)
        if (!instrs[static_cast<size_t>(dep)].deferred) carried[static_cast<size_t>(dep)] = true;
  return carried;
}

std::string Program::str(size_t i) const {
  const Instr& instr = instrs.at(i);
  std::string line = fmt::format("#{} {} {}", i, instr.micro_batch >= 0 ? fmt::format("mb{}", instr.micro_batch) : "-",
                                 lane_name(*this, instr.lane));
  line += " " + std::visit(OperationPrinter{*this, instr}, instr.op) + facts_str(instr);
  if (instr.priority != 0) line += fmt::format(" prio {}", instr.priority);
  if (!instr.after.empty())
    line += fmt::format(" after {}#{}", instr.deferred ? "last step's " : "", fmt::join(instr.after, " #"));
  else if (instr.deferred)
    line += " deferred";
  if (!instr.name.empty()) line += fmt::format("  \"{}\"", instr.name);
  return line;
}

std::string Program::event_name(size_t i) const {
  const Instr& instr = instrs.at(i);
  return std::visit(
      [&](const auto& op) -> std::string {
        using Op = std::decay_t<decltype(op)>;
        if constexpr (std::is_same_v<Op, Compute> || std::is_same_v<Op, Reshard> || std::is_same_v<Op, Route>) {
          const Node& node = graph_of(instr.micro_batch).nodes()[static_cast<size_t>(op.node)];
          if constexpr (std::is_same_v<Op, Compute> || std::is_same_v<Op, Route>)
            return fmt::format("{} ({})", node.name, node.op());
          else return fmt::format("{} ({} -> {})", graph_of(instr.micro_batch).value(node.inputs.front()).name,
                                  op.from.str(), op.to.str());
        } else {
          const char* kind = std::is_same_v<Op, Accumulate> ? "accumulate"
                             : std::is_same_v<Op, Norm>     ? "norm"
                             : std::is_same_v<Op, Finite>   ? "finite"
                             : std::is_same_v<Op, Clip>     ? "clip"
                             : std::is_same_v<Op, Update>   ? "update"
                                                            : nullptr;
          if (kind) return instr.name.empty() ? std::string(kind) : fmt::format("{} {}", kind, instr.name);
          return instr.name.empty() ? str(i).substr(0, 80) : instr.name;
        }
      },
      instr.op);
}

std::string Program::str() const {
  std::string s = fmt::format("program: rank {} of mesh {} (coords [{}]), ZeRO-{}, {} micro-batch{}, {}\n", rank,
                              strategy.mesh.str(), fmt::join(coords, ","), strategy.zero_stage,
                              micro_batches.size(), micro_batches.size() == 1 ? "" : "es",
                              training ? "training" : "forward only");
  if (!(collective == comm::CollectiveOptions{}))
    s += fmt::format("collectives: {}{}\n", comm::algorithm_name(collective.algorithm),
                     collective.ranks_per_node > 0 ? fmt::format(", {} ranks a node", collective.ranks_per_node) : "");
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const MicroBatch& mb = micro_batches[m];
    s += fmt::format("micro-batch {}: {} row{} from global row {}\n", m, mb.rows, mb.rows == 1 ? "" : "s", mb.row_offset);
  }
  if (pipeline.axis >= 0) {
    const PipelineSchedule& ps = pipeline.schedule;
    s += fmt::format("pipeline: {} over '{}', {} stages x {} chunk{}, this rank's virtual stages", pipeline_kind_name(ps.kind),
                     axis_str(*this, pipeline.axis), ps.stages, ps.virtual_stages, ps.virtual_stages == 1 ? "" : "s");
    const int r = coords[static_cast<size_t>(pipeline.axis)];
    for (int c = 0; c < ps.virtual_stages; ++c) {
      const size_t v = static_cast<size_t>(ps.virtual_stage(r, c));
      s += fmt::format(" {} ({})", v, pipeline.stage_layers.at(v));
    }
    s += "\n";
  }
  s += fmt::format("parameters: {} tensors, {} elements; shard {} elements\n", params.size(), param_count, shard_count);
  for (size_t b = 0; b < buckets.size(); ++b) {
    const BucketLayout& bucket = buckets[b];
    std::string names;
    for (int m : bucket.members) names += (names.empty() ? "" : " ") + params[static_cast<size_t>(m)].name;
    s += fmt::format("bucket {}: [{}:{}] prio {} block [{}:{}] -> shard[{}:{}]: {}\n", b, bucket.offset,
                     bucket.offset + bucket.count, bucket.priority, bucket.block_begin,
                     bucket.block_begin + bucket.block_count, bucket.shard_offset,
                     bucket.shard_offset + bucket.block_count, names);
  }
  for (size_t b = 0; b < buffers.size(); ++b)
    s += fmt::format("buffer {}: {} {} {}[{}]{}\n", b, buffers[b].name, buffer_kind_name(buffers[b].kind),
                     dtype_name(buffers[b].dtype), buffers[b].count, buffers[b].persistent ? " persistent" : "");
  for (size_t i = 0; i < instrs.size(); ++i) s += str(i) + "\n";
  return s;
}

bool Program::operator==(const Program& other) const {
  if (graphs.size() != other.graphs.size()) return false;
  for (size_t g = 0; g < graphs.size(); ++g) {
    if (graphs[g].str() != other.graphs[g].str() || graphs[g].values().size() != other.graphs[g].values().size())
      return false;
    for (size_t v = 0; v < graphs[g].values().size(); ++v)
      if (!(graphs[g].values()[v].spec == other.graphs[g].values()[v].spec)) return false;
  }
  return strategy == other.strategy && rank == other.rank && coords == other.coords &&
         micro_batches == other.micro_batches && global_rows == other.global_rows && batch_inputs == other.batch_inputs && batch_feeds == other.batch_feeds && boxes == other.boxes &&
         batch_rows == other.batch_rows && loss == other.loss &&
         outputs == other.outputs && params == other.params && buckets == other.buckets &&
         param_count == other.param_count && shard_count == other.shard_count && buffers == other.buffers &&
         instrs == other.instrs && params_buffer == other.params_buffer &&
         param_shard_buffer == other.param_shard_buffer && grad_shard_buffer == other.grad_shard_buffer &&
         loss_buffer == other.loss_buffer && norm_buffer == other.norm_buffer && training == other.training &&
         subgroups == other.subgroups && groups == other.groups && collective == other.collective &&
         pipeline == other.pipeline;
}

}  // namespace px::parallel
