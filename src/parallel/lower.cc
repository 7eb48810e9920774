#include "parallel/lower.h"

#include <algorithm>
#include <limits>
#include <map>

#include "comm/buffer.h"
#include "core/error.h"

namespace px::parallel {

std::vector<ValueId> Program::wanted() const {
  std::vector<ValueId> w{loss};
  for (const GradientSync& g : grads) w.push_back(g.grad);
  return w;
}

Graph localize(const Graph& graph, const std::vector<Placement>& placement, int shards, int index,
               int64_t batch_rows) {
  Graph local;
  const auto& values = graph.values();
  const auto& nodes = graph.nodes();
  auto local_spec = [&](size_t v) {
    TensorSpec spec = values[v].spec;
    const Placement& p = placement[v];
    if (!p.is_split()) return spec;
    PX_CHECK_LT(p.dim, spec.shape.rank());
    std::vector<int64_t> dims = spec.shape.dims();
    int64_t& extent = dims[static_cast<size_t>(p.dim)];
    if (values[v].kind == Value::Kind::input && p.dim == 0) extent = batch_rows;
    else extent = comm::block(extent, shards, index).count;
    spec.shape = Shape(std::move(dims));
    return spec;
  };
  // Values are numbered in creation order and a node creates its outputs
  // together, so re-adding inputs, params and nodes in value order gives
  // every local value the global value's id.
  size_t next_node = 0;
  for (size_t v = 0; v < values.size(); ++v) {
    const Value& value = values[v];
    ValueId id = kNoValue;
    if (value.kind == Value::Kind::input) {
      id = local.input(value.name, local_spec(v));
    } else if (value.kind == Value::Kind::param) {
      id = local.param(value.name, local_spec(v), value.init, value.weight_decay);
    } else {
      if (value.output_index != 0) continue;  // created with output 0
      PX_CHECK_EQ(static_cast<size_t>(value.producer), next_node);
      const Node& node = nodes[next_node++];
      try {
        id = local.add(node.op(), node.inputs, node.attrs, node.name).front();
      } catch (const Error& e) {
        fail("lowering shard {} of {}: {}", index, shards, e.what());
      }
    }
    PX_CHECK_EQ(id, static_cast<ValueId>(v));
  }
  for (const auto& [name, id] : graph.outputs()) local.mark_output(id, name);
  return local;
}

namespace {

// Position of every node in execution order is its index (nodes are added
// in topological order); a gradient is ready when its producer has run.
std::vector<int> forward_order_of_params(const Graph& graph) {
  std::vector<int> order(graph.values().size(), std::numeric_limits<int>::max());
  int next = 0;
  for (const Node& node : graph.nodes())
    for (ValueId in : node.inputs)
      if (graph.value(in).kind == Value::Kind::param && order[static_cast<size_t>(in)] == std::numeric_limits<int>::max())
        order[static_cast<size_t>(in)] = next++;
  return order;
}

}  // namespace

Program lower(const Graph& graph, ValueId loss, const std::vector<std::pair<ValueId, ValueId>>& param_grads,
              const Strategy& strategy, int rank, int64_t batch_rows) {
  const int shards = strategy.data_ranks();
  const std::vector<Placement>& placement = strategy.placement.of_value;
  Program program;
  program.local = localize(graph, placement, shards, rank, batch_rows);
  program.loss = loss;
  if (placement[static_cast<size_t>(loss)] != Placement::P() && shards > 1)
    fail("lowering: the loss comes out {} across the data axis; expected P (each rank a summand)",
         placement[static_cast<size_t>(loss)].str());

  const std::vector<int> first_use = forward_order_of_params(graph);
  for (const auto& [param, grad] : param_grads) {
    const Placement& pg = placement[static_cast<size_t>(grad)];
    const Placement& pw = placement[static_cast<size_t>(param)];
    if (pw != Placement::B())
      fail("lowering: parameter '{}' is {} across the data axis; data parallelism replicates weights (B)",
           graph.value(param).name, pw.str());
    if (shards > 1 && pg != Placement::P())
      fail("lowering: the gradient of '{}' comes out {}; a replicated weight's gradient must be P",
           graph.value(param).name, pg.str());
    program.grads.push_back({.param = param,
                             .grad = grad,
                             .name = graph.value(param).name,
                             .count = graph.spec(param).shape.numel(),
                             .offset = 0,
                             .bucket = 0,
                             .forward_order = first_use[static_cast<size_t>(param)]});
  }
  // Ready order: by the node producing each gradient.
  auto producer = [&](const GradientSync& g) { return graph.value(g.grad).producer; };
  std::stable_sort(program.grads.begin(), program.grads.end(),
                   [&](const GradientSync& a, const GradientSync& b) { return producer(a) < producer(b); });

  const int64_t bucket_elems = std::max<int64_t>(1, strategy.sync.bucket_bytes / 4);
  for (size_t i = 0; i < program.grads.size(); ++i) {
    GradientSync& g = program.grads[i];
    if (program.buckets.empty() || program.buckets.back().count >= bucket_elems ||
        strategy.sync.bucket_bytes == 0)
      program.buckets.push_back({.offset = program.arena_count, .count = 0, .members = {},
                                 .priority = std::numeric_limits<int>::max()});
    Bucket& b = program.buckets.back();
    g.offset = program.arena_count;
    g.bucket = static_cast<int>(program.buckets.size() - 1);
    b.count += g.count;
    b.members.push_back(static_cast<int>(i));
    b.priority = std::min(b.priority, g.forward_order);
    program.arena_count += g.count;
  }
  return program;
}

}  // namespace px::parallel
