// Placement propagation and lowering on real model graphs: a batch split
// makes every weight gradient and the loss P, the resharding rule turns
// placement changes into the collectives, the local graphs have the shard's
// shapes, gradients are bucketed in the order backward produces them, the
// liveness frees every step buffer, and an unsupported placement is a named
// error.
#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "graph/autodiff.h"
#include "nn/gpt.h"
#include "parallel/lower.h"
#include "parallel/lower/liveness.h"
#include "parallel/lower/reshard.h"
#include "parallel/compose.h"
#include "nn/model.h"

namespace px::parallel {
namespace {

nn::Model gpt(int64_t batch) {
  nn::GptConfig c{.vocab = 64, .block = 8, .n_layer = 2, .n_head = 2, .n_embd = 16, .dropout = 0.1};
  return nn::build_gpt(c, batch, c.block, true);
}

Program lowered(const nn::Model& m, const Strategy& s, int rank) {
  return lower({.forward = &m.graph, .loss = m.loss}, s, rank);
}

// Propagation on a one-axis mesh {dp: 2} from the seeds of inputs and
// parameters (by value id; activations' entries are ignored).
Propagation place(const Graph& graph, const std::vector<Placement>& seeds) {
  static const DeviceMesh mesh = DeviceMesh::data_parallel(2);
  PlacementRequest request{.graph = &graph, .mesh = &mesh, .seeds = {}, .targets = {}};
  for (size_t v = 0; v < seeds.size(); ++v) {
    const bool seeded = graph.values()[v].kind != Value::Kind::activation;
    request.seeds.push_back({seeded ? std::optional(seeds[v]) : std::nullopt});
  }
  return propagate(request);
}

TEST(Propagation, BatchSplitMakesEveryWeightGradientAndTheLossPartial) {
  nn::Model m = gpt(6);
  Graph graph = m.graph;
  Gradients grads = build_backward(graph, m.loss, graph.params());
  std::vector<Placement> seeds(graph.values().size(), Placement::B());
  seeds[m.inputs] = seeds[m.targets] = Placement::S(0);
  Propagation p = place(graph, seeds);
  // Data parallelism needs no resharding inside the graph: nothing inserted.
  EXPECT_EQ(p.graph.nodes().size(), graph.nodes().size());
  auto at = [&](ValueId v) { return p.of_value[static_cast<size_t>(p.value_of[static_cast<size_t>(v)])].front(); };
  EXPECT_EQ(at(m.loss), Placement::P());
  EXPECT_EQ(at(m.logits), Placement::S(0));
  for (ValueId param : graph.params()) {
    EXPECT_EQ(at(param), Placement::B()) << graph.value(param).name;
    EXPECT_EQ(at(grads.at(param)), Placement::P()) << graph.value(param).name;
  }
}

TEST(Resharding, TheOneTableOfDesignMd) {
  EXPECT_EQ(resharding(Placement::P(), Placement::B()), Resharding::allreduce);
  EXPECT_EQ(resharding(Placement::P(), Placement::S(1)), Resharding::reduce_scatter);
  EXPECT_EQ(resharding(Placement::S(0), Placement::B()), Resharding::allgather);
  EXPECT_EQ(resharding(Placement::S(0), Placement::S(1)), Resharding::all_to_all);
  EXPECT_EQ(resharding(Placement::B(), Placement::S(0)), Resharding::slice);
  EXPECT_EQ(resharding(Placement::S(2), Placement::S(2)), Resharding::none);
  EXPECT_THROW(resharding(Placement::B(), Placement::P()), Error);
  EXPECT_EQ(collective_of(Resharding::slice), std::nullopt);
}

// Which collectives a data-parallel step costs, by ZeRO stage: nothing
// hand-placed, each comes from a placement change the rule maps.
TEST(Lowering, EachZeroStageCostsTheCollectivesOfItsPlacements) {
  nn::Model m = gpt(4);
  auto count = [&](int zero, comm::Collective kind) {
    Strategy s = data_parallel(2, batch_input_names(m));
    s.zero_stage = zero;
    s.lowering.bucket_bytes = 1 << 30;  // one bucket
    const Program p = lowered(m, s, 1);
    int n = 0;
    for (const Instr& i : p.instrs)
      if (const auto* c = std::get_if<Collective>(&i.op)) n += c->kind == kind;
    return n;
  };
  using comm::Collective;
  // Stage 0: the gradient bucket and the loss, P -> B.
  EXPECT_EQ(count(0, Collective::allreduce), 2);
  EXPECT_EQ(count(0, Collective::reduce_scatter), 0);
  EXPECT_EQ(count(0, Collective::allgather), 0);
  // Stage 1/2: gradients P -> S, updated parameters S -> B; the loss and
  // the squared gradient norm (summed over the shards) allreduced.
  for (int zero : {1, 2}) {
    EXPECT_EQ(count(zero, Collective::allreduce), 2) << zero;
    EXPECT_EQ(count(zero, Collective::reduce_scatter), 1) << zero;
    EXPECT_EQ(count(zero, Collective::allgather), 1) << zero;
  }
  // Stage 3: parameters stored S, gathered for forward and again for backward.
  EXPECT_EQ(count(3, Collective::allreduce), 2);
  EXPECT_EQ(count(3, Collective::reduce_scatter), 1);
  EXPECT_EQ(count(3, Collective::allgather), 2);
}

TEST(Lowering, LocalGraphHasTheShardShapesAndTheSameValueIds) {
  nn::Model m = gpt(6);
  Strategy s = data_parallel(3, batch_input_names(m));
  Program p = lowered(m, s, 1);
  ASSERT_EQ(p.graphs.size(), 1u);
  const Graph& local = p.graphs[0];
  EXPECT_EQ(local.spec(m.inputs).shape, Shape({2, 8}));
  EXPECT_EQ(local.spec(m.logits).shape, Shape({2, 8, 64}));
  EXPECT_EQ(p.micro_batches[0].row_offset, 2);
  for (ValueId param : m.graph.params()) {
    EXPECT_EQ(local.spec(param).shape, m.graph.spec(param).shape);
    EXPECT_EQ(local.value(param).name, m.graph.value(param).name);
  }
}

TEST(Lowering, UnevenMicroBatchesGetTheirOwnLocalGraphs) {
  nn::Model m = gpt(7);
  Strategy s = data_parallel(2, batch_input_names(m));
  s.micro_batches = 2;
  Program p = lowered(m, s, 0);  // rows 0..2 of 7: micro-batches of 1 and 2 rows
  ASSERT_EQ(p.micro_batches.size(), 2u);
  EXPECT_EQ(p.micro_batches[0].rows + p.micro_batches[1].rows, 3);
  EXPECT_EQ(p.graphs.size(), 2u);
  EXPECT_EQ(p.graph_of(1).spec(m.inputs).shape[0], p.micro_batches[1].rows);
}

TEST(Lowering, BucketsFollowBackwardOrderAndTileTheFlatLayout) {
  nn::Model m = gpt(4);
  Strategy s = data_parallel(2, batch_input_names(m));
  s.lowering.bucket_bytes = 4096;
  Program p = lowered(m, s, 0);
  Graph full = m.graph;
  Gradients grads = build_backward(full, m.loss, full.params());
  ASSERT_EQ(p.params.size(), m.graph.params().size());
  int64_t offset = 0;
  int last_producer = -1;
  for (const ParamLayout& param : p.params) {
    EXPECT_EQ(param.offset, offset) << param.name;
    offset += param.shape.numel();
    const int producer = full.value(grads.at(param.value)).producer;
    // (one node may produce several, e.g. layernorm's weight and bias gradients)
    EXPECT_GE(producer, last_producer) << param.name << " is produced before the previous gradient";
    last_producer = producer;
  }
  EXPECT_EQ(offset, p.param_count);
  ASSERT_GT(p.buckets.size(), 2u);
  int64_t covered = 0;
  for (const BucketLayout& b : p.buckets) {
    EXPECT_EQ(b.offset, covered);
    covered += b.count;
    // A bucket closes once it reaches the size: all but its last member fit below it.
    EXPECT_LT(b.count - p.params[static_cast<size_t>(b.members.back())].shape.numel(), 4096 / 4);
  }
  EXPECT_EQ(covered, p.param_count);
  // Backward runs last layer first: the first bucket holds the head / last block,
  // which forward needs last; the last bucket holds the embeddings, needed first.
  EXPECT_GT(p.buckets.front().priority, p.buckets.back().priority);
  EXPECT_EQ(p.buckets.back().priority, 0);
}

// Every non-persistent buffer a program allocates it also frees, after its
// last reader; ZeRO-2 frees a gradient bucket right after its reduce-scatter.
TEST(Liveness, EveryStepBufferIsFreedAfterItsLastUse) {
  nn::Model m = gpt(4);
  for (int zero : {0, 1, 2, 3}) {
    Strategy s = data_parallel(2, batch_input_names(m));
    s.zero_stage = zero;
    s.micro_batches = 2;
    s.lowering.bucket_bytes = 8192;
    const Program p = lowered(m, s, 1);
    const Liveness live = liveness(p);
    std::map<int, int> allocated;  // buffer -> instances
    for (const auto& list : live.allocates)
      for (int b : list) ++allocated[b];
    std::map<int, int> freed;
    for (size_t i = 0; i < p.instrs.size(); ++i)
      if (const auto* f = std::get_if<Free>(&p.instrs[i].op)) {
        ++freed[f->buffer];
        ASSERT_FALSE(p.instrs[i].after.empty());
      }
    EXPECT_EQ(allocated, freed) << "ZeRO-" << zero;
    for (const auto& [b, n] : allocated) {
      EXPECT_FALSE(p.buffers[static_cast<size_t>(b)].persistent);
      // ZeRO-2/3 refill a gradient bucket per micro-batch; ZeRO-3 gathers parameters per phase.
      const Buffer::Kind kind = p.buffers[static_cast<size_t>(b)].kind;
      if (kind == Buffer::Kind::grad_bucket) {
        EXPECT_EQ(n, zero >= 2 ? 2 : 1) << "ZeRO-" << zero;
      }
      if (kind == Buffer::Kind::param_bucket) {
        EXPECT_EQ(n, 4) << "ZeRO-" << zero;
      }
    }
  }
}

TEST(Strategy, JsonRoundTripsAndNamesBadFields) {
  Strategy s = data_parallel(4, {"tokens", "targets"});
  s.zero_stage = 2;
  s.micro_batches = 3;
  s.lowering.bucket_bytes = 1 << 20;
  EXPECT_EQ(strategy_from_json(to_json(s)), s);
  // Pipeline stages and recomputation travel too.
  Strategy piped = with_pipeline(s, 2, {.schedule = PipelineKind::interleaved, .virtual_stages = 2,
                                        .stage_cuts = {"h.1", "h.2", "h.3"}});
  piped.micro_batches = 4;
  piped.lowering.recompute = Recompute::selective;
  EXPECT_EQ(strategy_from_json(to_json(piped)), piped);
  nlohmann::json bad = to_json(piped);
  bad["pipeline"]["schedule"] = "2f2b";
  EXPECT_THROW(strategy_from_json(bad), Error);
  bad = to_json(s);
  bad["zero_stage"] = 5;
  EXPECT_THROW(strategy_from_json(bad), Error);
  bad = to_json(s);
  bad["shards"] = 2;
  try {
    strategy_from_json(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key 'shards'"), std::string::npos) << e.what();
  }
}

TEST(Lowering, AWeightSplitNoOpAcceptsIsANamedError) {
  nn::Model m = gpt(4);
  Graph& graph = m.graph;
  std::vector<Placement> seeds(graph.values().size(), Placement::B());
  seeds[m.inputs] = Placement::S(0);
  seeds[m.targets] = Placement::S(0);
  seeds[graph.find("ln_f.weight")] = Placement::S(0);
  try {
    place(graph, seeds);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("ln_f"), std::string::npos) << what;
    EXPECT_NE(what.find("layernorm"), std::string::npos) << what;
    EXPECT_NE(what.find("S(0)"), std::string::npos) << what;
  }
}

// The executor feeds a rank its rows along the data axis only; a batch
// input split along another axis would be fed whole and corrupt the step.
TEST(Lowering, ABatchInputSplitOffTheDataAxisIsANamedError) {
  nn::Model m = gpt(8);
  Strategy s = tensor_parallel(m.graph, 1, 2, batch_input_names(m), false);
  s.seeds.push_back({m.graph.value(m.inputs).name, "tp", Placement::S(0)});
  try {
    lower({.forward = &m.graph, .loss = m.loss}, s, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("batch input 'tokens' is placed S(0) along 'tp'"), std::string::npos) << what;
  }
}

// A batch input declared after nodes (as a graph built in any order may
// declare its labels) keeps its forward id for the feeds, though the
// reshards the lowering inserts before it shift its id in the local graph.
TEST(Lowering, ABatchInputDeclaredAfterReshardsIsFedByItsForwardId) {
  Graph g;
  const ParamInit init{.kind = ParamInit::Kind::normal, .scale = 0.1};
  const ValueId x = g.input("x", {Shape{8, 6}});
  ValueId h = g.add1("linear", {x, g.param("w1", {Shape{6, 4}}, init, true)}, {}, "fc1");  // (8, 4)
  h = g.add1("relu", {h}, {}, "relu1");
  h = g.add1("linear", {h, g.param("w2", {Shape{4, 4}}, init, true)}, {}, "fc2");  // row-parallel: P
  h = g.add1("relu", {h}, {}, "relu2");                                              // needs it whole
  const ValueId logits = g.add1("linear", {h, g.param("w3", {Shape{4, 3}}, init, true)}, {}, "fc3");
  const ValueId labels = g.input("labels", {Shape{8}, DType::i32});  // declared after the nodes
  const ValueId loss = g.add1("cross_entropy", {logits, labels}, {{"scale", 1.0 / 8}}, "loss");
  Strategy s = data_tensor_mesh(1, 2, {"x", "labels"});
  s.seeds.push_back({"w1", "tp", Placement::S(1)});  // column
  s.seeds.push_back({"w2", "tp", Placement::S(0)});  // row
  const Program p = lower({.forward = &g, .loss = loss}, s, 0);
  ASSERT_EQ(p.batch_inputs.size(), 2u);
  EXPECT_EQ(p.batch_feeds, (std::vector<ValueId>{x, labels}));
  const Graph& local = p.graphs.front();
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(local.value(p.batch_inputs[i]).name, g.value(p.batch_feeds[i]).name);
  // The allreduce before relu2 came first: the labels' local id moved.
  EXPECT_NE(p.batch_inputs[1], labels);
}

}  // namespace
}  // namespace px::parallel
