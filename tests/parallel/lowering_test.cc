// Placement propagation and lowering on real model graphs: a batch split
// makes every weight gradient and the loss P, the local graph has the
// shard's shapes, gradients are bucketed in the order backward produces
// them, and an unsupported placement is a named error.
#include <gtest/gtest.h>

#include <set>

#include "graph/autodiff.h"
#include "nn/gpt.h"
#include "parallel/lower.h"

namespace px::parallel {
namespace {

struct GptGraph {
  nn::Model model;
  std::vector<std::pair<ValueId, ValueId>> param_grads;
};

GptGraph gpt(int64_t batch) {
  nn::GptConfig c{.vocab = 64, .block = 8, .n_layer = 2, .n_head = 2, .n_embd = 16, .dropout = 0.1};
  GptGraph g{nn::build_gpt(c, batch, c.block, true), {}};
  Gradients grads = build_backward(g.model.graph, g.model.loss, g.model.graph.params());
  for (ValueId p : g.model.graph.params()) g.param_grads.emplace_back(p, grads.at(p));
  return g;
}

TEST(Propagation, BatchSplitMakesEveryWeightGradientAndTheLossPartial) {
  GptGraph g = gpt(6);
  Strategy s = data_parallel(g.model.graph, {g.model.inputs, g.model.targets}, 3);
  EXPECT_EQ(s.placement.of_value[g.model.loss], Placement::P());
  EXPECT_EQ(s.placement.of_value[g.model.logits], Placement::S(0));
  for (const auto& [param, grad] : g.param_grads) {
    EXPECT_EQ(s.placement.of_value[param], Placement::B()) << g.model.graph.value(param).name;
    EXPECT_EQ(s.placement.of_value[grad], Placement::P()) << g.model.graph.value(param).name;
  }
}

TEST(Lowering, LocalGraphHasTheShardShapesAndTheSameValueIds) {
  GptGraph g = gpt(6);
  Strategy s = data_parallel(g.model.graph, {g.model.inputs, g.model.targets}, 3);
  Program p = lower(g.model.graph, g.model.loss, g.param_grads, s, 1, 2);
  const Graph& local = p.local;
  ASSERT_EQ(local.values().size(), g.model.graph.values().size());
  EXPECT_EQ(local.spec(g.model.inputs).shape, Shape({2, 8}));
  EXPECT_EQ(local.spec(g.model.logits).shape, Shape({2, 8, 64}));
  for (const auto& [param, grad] : g.param_grads) {
    EXPECT_EQ(local.spec(param).shape, g.model.graph.spec(param).shape);
    EXPECT_EQ(local.spec(grad).shape, g.model.graph.spec(param).shape);
    EXPECT_EQ(local.value(param).name, g.model.graph.value(param).name);
  }
}

TEST(Lowering, BucketsFollowBackwardOrderAndTileTheArena) {
  GptGraph g = gpt(4);
  GradientSyncOptions sync;
  sync.bucket_bytes = 4096;
  Strategy s = data_parallel(g.model.graph, {g.model.inputs, g.model.targets}, 2, sync);
  Program p = lower(g.model.graph, g.model.loss, g.param_grads, s, 0, 2);
  ASSERT_EQ(p.grads.size(), g.param_grads.size());
  int64_t offset = 0;
  int last_producer = -1;
  for (const GradientSync& gs : p.grads) {
    EXPECT_EQ(gs.offset, offset) << gs.name;
    offset += gs.count;
    int producer = g.model.graph.value(gs.grad).producer;
    // (one node may produce several, e.g. layernorm's weight and bias gradients)
    EXPECT_GE(producer, last_producer) << gs.name << " is produced before the previous gradient";
    last_producer = producer;
  }
  EXPECT_EQ(offset, p.arena_count);
  ASSERT_GT(p.buckets.size(), 2u);
  int64_t covered = 0;
  for (const Bucket& b : p.buckets) {
    EXPECT_EQ(b.offset, covered);
    covered += b.count;
    // A bucket closes once it reaches the size: all but its last member fit below it.
    EXPECT_LT(b.count - p.grads[static_cast<size_t>(b.members.back())].count, 4096 / 4);
  }
  EXPECT_EQ(covered, p.arena_count);
  // Backward runs last layer first: the first bucket holds the head / last block,
  // which forward needs last; the last bucket holds the embeddings, needed first.
  EXPECT_GT(p.buckets.front().priority, p.buckets.back().priority);
  EXPECT_EQ(p.buckets.back().priority, 0);
}

TEST(Lowering, AWeightSplitNoOpAcceptsIsANamedError) {
  GptGraph g = gpt(4);
  Graph& graph = g.model.graph;
  std::vector<Placement> seeds(graph.values().size(), Placement::B());
  seeds[g.model.inputs] = Placement::S(0);
  seeds[g.model.targets] = Placement::S(0);
  seeds[graph.find("ln_f.weight")] = Placement::S(0);
  try {
    propagate(graph, seeds);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("ln_f"), std::string::npos) << what;
    EXPECT_NE(what.find("layernorm"), std::string::npos) << what;
    EXPECT_NE(what.find("S(0)"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace px::parallel
