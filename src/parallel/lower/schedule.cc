// schedule: the step's instructions up to the reduced gradients.
//
// Per micro-batch, every needed node of the local graph in order (forward,
// then backward); each weight gradient accumulated into its bucket as it is
// produced; a bucket's gradient collective (the transition's: allreduce
// P -> B, or reduce-scatter P -> S into the shard) right after its last
// gradient, on the last micro-batch (ZeRO-2/3: every micro-batch, each
// adding into the shard). ZeRO-3 gathers a parameter bucket (S -> B) before
// its first use in forward and again in backward, one bucket ahead.
// A micro-batch where this rank has no rows computes nothing but runs the
// same collectives (its gradient contribution is zero).
#include <algorithm>

#include "core/error.h"
#include "parallel/lower/passes.h"

namespace px::parallel::passes {
namespace {

// Nodes the loss, the outputs and the gradients need.
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

comm::Collective collective_for(const Transition& t) {
  const std::optional<comm::Collective> kind = collective_of(t.how);
  PX_CHECK(kind.has_value(), "transition {} -> {} of value {} runs no collective", t.from.str(), t.to.str(), t.value);
  return *kind;
}

}  // namespace

int emit(Program& program, Instr instr) {
  program.instrs.push_back(std::move(instr));
  return static_cast<int>(program.instrs.size() - 1);
}

void schedule(const Context& c, Program& p) {
  const Graph& graph = c.graph;
  const bool multi = c.data_size > 1;
  const int stream = comm_stream(c.data_axis);
  std::vector<ValueId> wanted{c.loss};
  for (ValueId v : p.outputs) wanted.push_back(v);
  std::vector<int> param_of(graph.values().size(), -1), grad_of(graph.values().size(), -1);
  for (size_t i = 0; i < p.params.size(); ++i) {
    param_of[static_cast<size_t>(p.params[i].value)] = static_cast<int>(i);
    if (p.params[i].grad != kNoValue) {
      grad_of[static_cast<size_t>(p.params[i].grad)] = static_cast<int>(i);
      wanted.push_back(p.params[i].grad);
    }
  }
  const std::vector<int> nodes = needed_nodes(graph, wanted);

  // ZeRO-3: per phase (forward, backward), buckets in the order of their first use.
  const bool gather = p.param_shard_buffer >= 0;
  std::vector<std::vector<int>> gather_order(2);
  if (gather)
    for (int n : nodes) {
      std::vector<int>& order = gather_order[n < c.forward_nodes ? 0 : 1];
      for (ValueId in : graph.nodes()[static_cast<size_t>(n)].inputs)
        if (param_of[static_cast<size_t>(in)] >= 0) {
          const int b = p.params[static_cast<size_t>(param_of[static_cast<size_t>(in)])].bucket;
          if (std::find(order.begin(), order.end(), b) == order.end()) order.push_back(b);
        }
    }

  const int micro = static_cast<int>(p.micro_batches.size());
  const bool reduce_every_micro_batch = c.zero_stage >= 2;
  int last_loss = -1;
  for (int m = 0; m < micro; ++m) {
    const bool computes = p.micro_batches[static_cast<size_t>(m)].rows > 0;
    const bool reduce_now = reduce_every_micro_batch || m == micro - 1;
    std::vector<int> missing(p.buckets.size()), last_accumulate(p.buckets.size(), -1);
    for (size_t b = 0; b < p.buckets.size(); ++b) missing[b] = static_cast<int>(p.buckets[b].members.size());
    std::vector<int> gathered(p.buckets.size(), -1);  // this phase's gather instruction per bucket
    std::vector<bool> used(p.buckets.size(), false);  // read by a node of this phase yet
    int phase = -1;
    size_t next_gather = 0;
    auto emit_gather = [&](int b) {
      const BucketLayout& bucket = p.buckets[static_cast<size_t>(b)];
      const Transition& t = c.transition(Transition::Site::parameter_use,
                                         p.params[static_cast<size_t>(bucket.members.front())].value);
      gathered[static_cast<size_t>(b)] = emit(
          p, {.op = Collective{.kind = collective_for(t),
                               .axis = c.data_axis,
                               .input = {p.param_shard_buffer, bucket.shard_offset, bucket.block_count},
                               .output = {bucket.param_buffer, 0, bucket.count}},
              .stream = stream,
              .micro_batch = m,
              .name = fmt::format("gather bucket {} ({})", b, phase == 0 ? "forward" : "backward")});
    };
    for (int n : nodes) {
      const Node& node = graph.nodes()[static_cast<size_t>(n)];
      Instr compute{.op = Compute{n}, .stream = kComputeStream, .micro_batch = m};
      if (node.op() == "reshard") {
        // A placement change propagation inserted: the rule's collective on the value.
        const int axis = static_cast<int>(node.attrs.get_int("axis"));
        compute.op = Reshard{.node = n,
                             .axis = axis,
                             .from = placement_from_string(node.attrs.get_string("from")),
                             .to = placement_from_string(node.attrs.get_string("to"))};
        compute.stream = comm_stream(axis);
      }
      if (gather) {
        const int node_phase = n < c.forward_nodes ? 0 : 1;
        if (node_phase != phase) {
          phase = node_phase;
          std::fill(gathered.begin(), gathered.end(), -1);
          std::fill(used.begin(), used.end(), false);
          next_gather = 0;
        }
        const std::vector<int>& order = gather_order[static_cast<size_t>(phase)];
        bool first_use = false;
        for (ValueId in : node.inputs) {
          if (param_of[static_cast<size_t>(in)] < 0) continue;
          const int b = p.params[static_cast<size_t>(param_of[static_cast<size_t>(in)])].bucket;
          while (gathered[static_cast<size_t>(b)] < 0) emit_gather(order[next_gather++]);
          first_use = first_use || !used[static_cast<size_t>(b)];
          used[static_cast<size_t>(b)] = true;
          compute.after.push_back(gathered[static_cast<size_t>(b)]);
        }
        // Entering a bucket, gather the next one: it arrives while this one is used.
        if (first_use && next_gather < order.size()) emit_gather(order[next_gather++]);
        std::sort(compute.after.begin(), compute.after.end());
        compute.after.erase(std::unique(compute.after.begin(), compute.after.end()), compute.after.end());
      }
      if (computes) emit(p, std::move(compute));
      for (ValueId out : node.outputs) {
        if (out == c.loss && computes)
          last_loss = emit(p, {.op = Accumulate{out, {p.loss_buffer, 0, 1}}, .stream = kComputeStream, .micro_batch = m});
        const int i = grad_of[static_cast<size_t>(out)];
        if (i < 0) continue;
        const ParamLayout& param = p.params[static_cast<size_t>(i)];
        const BucketLayout& bucket = p.buckets[static_cast<size_t>(param.bucket)];
        if (computes)
          last_accumulate[static_cast<size_t>(param.bucket)] =
              emit(p, {.op = Accumulate{out, {bucket.grad_buffer, param.offset - bucket.offset, param.shape.numel()}},
                       .stream = kComputeStream,
                       .micro_batch = m});
        if (--missing[static_cast<size_t>(param.bucket)] > 0 || !reduce_now || !multi) continue;
        const Transition& t = c.transition(Transition::Site::gradient, param.grad);
        Collective reduce{.kind = collective_for(t), .axis = c.data_axis, .input = {bucket.grad_buffer, 0, bucket.count}};
        if (reduce.kind == comm::Collective::reduce_scatter) {
          reduce.output = {p.grad_shard_buffer, bucket.shard_offset, bucket.block_count};
          reduce.accumulate = reduce_every_micro_batch && m > 0;
        }
        // Compressed: one gradient a bucket, seen as (first dim, the rest);
        // vectors (a fraction of a percent of the bytes) go uncompressed, as
        // DGC and PowerSGD do: top-k of a 10-element bias would starve it.
        if (c.strategy.lowering.compression.lossy()) {
          const bool matrix = param.shape.rank() >= 2;
          if (matrix) reduce.codec = c.strategy.lowering.compression;
          reduce.codec_rows = matrix ? param.shape[0] : 1;
          reduce.codec_cols = param.shape.numel() / reduce.codec_rows;
        }
        const int last = last_accumulate[static_cast<size_t>(param.bucket)];
        emit(p, {.op = reduce,
                 .stream = stream,
                 .micro_batch = m,
                 .priority = bucket.priority,
                 .after = last >= 0 ? std::vector<int>{last} : std::vector<int>{},
                 .name = fmt::format("grad bucket {}", param.bucket)});
      }
    }
  }
  if (multi) {
    const Transition& t = c.transition(Transition::Site::loss, c.loss);
    emit(p, {.op = Collective{.kind = collective_for(t), .axis = c.data_axis, .input = {p.loss_buffer, 0, 1}},
             .stream = stream,
             .after = last_loss >= 0 ? std::vector<int>{last_loss} : std::vector<int>{},
             .name = "loss"});
  }
}

}  // namespace px::parallel::passes
