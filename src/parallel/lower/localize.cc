// localize: the rank's local graphs. Every S(d) value is cut to the rank's
// block of dim d; batch inputs (S(0) inputs) get the micro-batch's rows;
// the shape rules re-run, so every node's output has its local shape.
#include <map>

#include "comm/buffer.h"
#include "core/error.h"
#include "data/sampler.h"
#include "parallel/lower/passes.h"

namespace px::parallel::passes {

Graph localize_graph(const Graph& graph, const std::vector<Placement>& placement, int shards, int index,
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

void localize(const Context& c, Program& program) {
  const Graph& graph = c.graph;
  // The global batch is the batch inputs' dim 0 (they must agree).
  int64_t global_rows = -1;
  for (ValueId v : graph.inputs()) {
    if (c.placement.of_value[static_cast<size_t>(v)] != Placement::S(0)) continue;
    program.batch_inputs.push_back(v);
    const int64_t rows = graph.spec(v).shape[0];
    if (global_rows >= 0 && rows != global_rows)
      fail("lowering: batch inputs disagree on the batch: '{}' has {} rows, another {}", graph.value(v).name, rows,
           global_rows);
    global_rows = rows;
  }
  if (global_rows < 0) {
    if (c.data_size > 1)
      fail("lowering: no graph input is split S(0) along the data axis '{}', so {} ranks would compute the same "
           "thing: seed the batch inputs",
           c.strategy.data_axis, c.data_size);
    global_rows = 1;
  }
  if (global_rows < c.data_size)
    fail("the global batch of {} rows cannot be split over {} data-parallel ranks: expected at least one row a rank",
         global_rows, c.data_size);
  // The rows the samplers serve this rank (data/sampler.h), in micro-batches cut the same way.
  const RowRange mine = shard_rows(global_rows, c.data_rank, c.data_size);
  std::map<int64_t, int> graph_of_rows;
  for (int m = 0; m < c.strategy.micro_batches; ++m) {
    const RowRange part = shard_rows(mine.size(), m, c.strategy.micro_batches);
    MicroBatch mb{.rows = part.size(), .row_begin = part.begin, .row_offset = mine.begin + part.begin, .graph = -1};
    if (part.size() > 0) {
      auto [it, fresh] = graph_of_rows.emplace(part.size(), static_cast<int>(program.graphs.size()));
      if (fresh)
        program.graphs.push_back(
            localize_graph(graph, c.placement.of_value, c.data_size, c.data_rank, part.size()));
      mb.graph = it->second;
    }
    program.micro_batches.push_back(mb);
  }
}

}  // namespace px::parallel::passes
