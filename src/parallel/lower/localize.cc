// localize: the rank's local graphs. Every value is cut to the rank's part
// on the model axes (parallel/shard.h: blocks, grouped blocks, nested
// blocks); values split S(0) along the data axis get the micro-batch's
// rows. Attributes that name sizes are rewritten by the op's localize hook
// (reshape's target, a reshard's shape), and the shape rules re-run as a
// check: a split an op cannot take (heads not divisible by the ranks) is a
// named error here, before anything runs.
#include <map>

#include "comm/buffer.h"
#include "core/error.h"
#include "parallel/lower/passes.h"
#include "parallel/row_split.h"
#include "parallel/shard.h"

namespace px::parallel::passes {
namespace {

struct LocalGraph {
  Graph graph;
  std::vector<ShardBox> boxes;
};

LocalGraph localize_graph(const Context& c, int64_t batch_rows) {
  const Graph& graph = c.graph;
  const DeviceMesh& mesh = c.strategy.mesh;
  const auto& values = graph.values();
  const auto& nodes = graph.nodes();
  LocalGraph out;
  // The data axis' batch split is the micro-batch's rows; its ZeRO split is the buckets'.
  auto placement_without_batch = [&](size_t v) {
    AxisPlacements p = c.placement.of_value[v];
    if (p[static_cast<size_t>(c.data_axis)] == Placement::S(0)) p[static_cast<size_t>(c.data_axis)] = Placement::B();
    return p;
  };
  // A batch value's rows are the micro-batch's first, then cut like any
  // dim by the model axes that split them too (a tensor-parallel slice of
  // the router's choices).
  auto local_spec = [&](size_t v) {
    TensorSpec spec = values[v].spec;
    const Placement& data = c.placement.of_value[v][static_cast<size_t>(c.data_axis)];
    if (data == Placement::S(0)) {
      std::vector<int64_t> dims = spec.shape.dims();
      dims[0] = batch_rows;
      spec.shape = Shape(dims);
    }
    spec.shape = local_shape(spec.shape, placement_without_batch(v), mesh, c.coords);
    return spec;
  };
  for (size_t v = 0; v < values.size(); ++v) {
    TensorSpec global = values[v].spec;
    ShardBox box = shard_box(global.shape, placement_without_batch(v), mesh, c.coords);
    if (box.whole()) box = {std::vector<int64_t>(static_cast<size_t>(global.shape.rank()), 0), global.shape};
    out.boxes.push_back(std::move(box));
  }
  // Values are numbered in creation order and a node creates its outputs
  // together, so re-adding inputs, params and nodes in value order gives
  // every local value the global value's id.
  size_t next_node = 0;
  for (size_t v = 0; v < values.size(); ++v) {
    const Value& value = values[v];
    ValueId id = kNoValue;
    if (value.kind == Value::Kind::input) {
      id = out.graph.input(value.name, local_spec(v));
    } else if (value.kind == Value::Kind::param) {
      id = out.graph.param(value.name, local_spec(v), value.init, value.weight_decay, value.sign_rate);
    } else {
      if (value.output_index != 0) continue;  // created with output 0
      PX_CHECK_EQ(static_cast<size_t>(value.producer), next_node);
      const Node& node = nodes[next_node++];
      std::vector<TensorSpec> in, expected;
      for (ValueId i : node.inputs) in.push_back(out.graph.spec(i));
      for (ValueId o : node.outputs) expected.push_back(local_spec(static_cast<size_t>(o)));
      const Attrs attrs = node.def->localize ? node.def->localize(node.attrs, in, expected) : node.attrs;
      try {
        id = out.graph.add(node.op(), node.inputs, attrs, node.name).front();
        // Backward nodes keep their forward origin (the executor tells forward activations by it).
        if (node.origin >= 0) out.graph.set_origin(static_cast<int>(out.graph.nodes().size()) - 1, node.origin);
      } catch (const Error& e) {
        fail("lowering rank {} (mesh coords [{}]): {}", c.strategy.mesh.rank_of(c.coords), fmt::join(c.coords, ","),
             e.what());
      }
      for (size_t o = 0; o < node.outputs.size(); ++o)
        if (out.graph.spec(node.outputs[o]) != expected[o])
          fail("lowering: on rank {} node '{}' ({}) gives {} for its output {}, but its placement {} asks for {}: "
               "the op cannot run on this split (split dims must hold whole units, e.g. heads, on every rank)",
               c.strategy.mesh.rank_of(c.coords), node.name, node.op(), out.graph.spec(node.outputs[o]).str(), o,
               placements_str(c.placement.of_value[static_cast<size_t>(node.outputs[o])]),
               expected[o].str());
    }
    PX_CHECK_EQ(id, static_cast<ValueId>(v));
  }
  for (const auto& [name, id] : graph.outputs()) out.graph.mark_output(id, name);
  return out;
}

}  // namespace

void localize(const Context& c, Program& program) {
  const Graph& graph = c.graph;
  // The global batch is the batch inputs' dim 0 (they must agree).
  int64_t global_rows = -1;
  for (ValueId v : graph.inputs()) {
    if (c.data_placement(v) != Placement::S(0)) continue;
    program.batch_inputs.push_back(v);
    const int64_t rows = graph.spec(v).shape[0];
    if (global_rows >= 0 && rows != global_rows)
      fail("lowering: batch inputs disagree on the batch: '{}' has {} rows, another {}", graph.value(v).name, rows,
           global_rows);
    global_rows = rows;
  }
  if (global_rows < 0) {
    if (c.row_ranks > 1)
      fail("lowering: no graph input is split S(0) along the data axis '{}', so {} ranks would compute the same "
           "thing: seed the batch inputs",
           c.strategy.data_axis, c.row_ranks);
    global_rows = 1;
  }
  // Fewer rows than data-parallel ranks (an epoch's partial last batch)
  // leaves some ranks without rows: they compute nothing and run the same
  // collectives with zeros (the options refuse a full batch that small).
  program.global_rows = global_rows;
  for (size_t v = 0; v < graph.values().size(); ++v) program.batch_rows.push_back(c.data_placement(static_cast<ValueId>(v)) == Placement::S(0));
  // A batch value gathered whole along the data axis (a router with a
  // capacity routes the whole batch's tokens together) holds every rank's
  // rows of one step; cut into micro-batches, ranks of different row
  // counts would gather different micro-batch sizes.
  if (c.strategy.micro_batches > 1 && c.row_ranks > 1)
    for (const Node& node : graph.nodes())
      if (node.op() == "reshard" && node.attrs.get_int("axis") == c.data_axis &&
          node.attrs.get_string("from") == "S(0)" && node.attrs.get_string("to") == "B")
        fail("lowering: '{}' is gathered whole along the data axis '{}' (a router with a capacity routes the whole "
             "batch's tokens together), which {} micro-batches a step cannot give: train one micro-batch a step, "
             "on one data-parallel rank, or route dropless (--capacity-factor 0)",
             graph.value(node.inputs.front()).name, c.strategy.data_axis, c.strategy.micro_batches);
  // The rows the tasks serve this rank (parallel/row_split.h), in micro-batches cut the same way.
  const RowRange mine = shard_rows(global_rows, c.row_rank, c.row_ranks, c.strategy.row_shares);
  std::map<int64_t, int> graph_of_rows;
  for (int m = 0; m < c.strategy.micro_batches; ++m) {
    const RowRange part = shard_rows(mine.size(), m, c.strategy.micro_batches);
    MicroBatch mb{.rows = part.size(), .row_begin = part.begin, .row_offset = mine.begin + part.begin, .graph = -1};
    if (part.size() > 0) {
      auto [it, fresh] = graph_of_rows.emplace(part.size(), static_cast<int>(program.graphs.size()));
      if (fresh) {
        LocalGraph local = localize_graph(c, part.size());
        program.graphs.push_back(std::move(local.graph));
        program.boxes.push_back(std::move(local.boxes));
      }
      mb.graph = it->second;
    }
    program.micro_batches.push_back(mb);
  }
  // A rank without rows still has a local graph (no micro-batch runs it):
  // its parameters' local shapes and ids are what the executor lays out.
  if (program.graphs.empty()) {
    LocalGraph local = localize_graph(c, 0);
    program.graphs.push_back(std::move(local.graph));
    program.boxes.push_back(std::move(local.boxes));
  }
  // What this rank receives in another dtype than its producer makes (a
  // pipeline's bf16 transfers) it holds in that dtype.
  for (const Phase& phase : c.work.phases) {
    if (phase.kind != Phase::Kind::recv) continue;
    for (ValueId v : phase.values) {
      const DType dtype = c.work.transfer_dtype[static_cast<size_t>(v)];
      for (Graph& g : program.graphs)
        if (g.spec(v).dtype != dtype) g.set_dtype(v, dtype);
    }
  }
}

}  // namespace px::parallel::passes
