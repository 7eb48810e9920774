// Megatron tensor parallelism against a single rank: the GPT with dropout
// at tp = 2 and 4 (4 heads) and tp = 3 (6 heads; a 256-byte vocabulary
// that 3 does not divide), each with and without sequence parallelism;
// dp=2 x tp=2 in-process, with ZeRO-1 over dp; the MLP at tp=2. Per-step
// losses over 50 steps within 1e-5 relative of one rank on the same global
// batch. Also what the lowering emits per transformer layer, and resuming
// a checkpoint under another strategy.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>

#include "nn/build_model.h"
#include "nn/gpt.h"
#include "parallel/lower.h"
#include "parallel/lower/reshard.h"
#include "parallel/strategy_equivalence.h"
#include "parallel/compose.h"
#include "parallel/split_units.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/tasks/task.h"
#include "testing/expect_train_error.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::kEquivalenceSteps;
using testing::kEquivalenceTolerance;

JobSpec gpt_job(int heads) {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt.n_head = heads;
  o.model.gpt.n_embd = 8 * heads;
  o.run.steps = kEquivalenceSteps;
  o.optimizer.schedule.total = kEquivalenceSteps;
  o.data.batch = 8;
  return o;
}

struct TpCase {
  int heads, ranks, tp;
  bool sequence_parallel;
  int zero_stage = 0;
};

class GptTensorParallel : public ::testing::TestWithParam<TpCase> {};

TEST_P(GptTensorParallel, MatchesOneRank) {
  const TpCase& c = GetParam();
  JobSpec o = gpt_job(c.heads);
  const auto& single = testing::reference_losses(fmt::format("gpt{}", c.heads), o);
  o.launch.ranks = c.ranks;
  o.strategy.tensor_parallel = c.tp;
  o.strategy.sequence_parallel = c.sequence_parallel;
  o.strategy.zero_stage = c.zero_stage;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                              fmt::format("gpt ({} heads) on {} ranks at tp={}{}{}", c.heads, c.ranks, c.tp,
                                          c.sequence_parallel ? " with sequence parallelism" : "",
                                          c.zero_stage ? fmt::format(", ZeRO-{}", c.zero_stage) : ""));
}

INSTANTIATE_TEST_SUITE_P(Meshes, GptTensorParallel,
                         ::testing::Values(TpCase{4, 2, 2, false}, TpCase{4, 2, 2, true}, TpCase{4, 4, 4, false},
                                           TpCase{4, 4, 4, true}, TpCase{6, 3, 3, false}, TpCase{6, 3, 3, true},
                                           TpCase{4, 4, 2, false}, TpCase{4, 4, 2, true},
                                           TpCase{4, 4, 2, false, 1}),
                         [](const ::testing::TestParamInfo<TpCase>& info) {
                           const TpCase& c = info.param;
                           return fmt::format("heads{}_dp{}_tp{}{}{}", c.heads, c.ranks / c.tp, c.tp,
                                              c.sequence_parallel ? "_sp" : "",
                                              c.zero_stage ? fmt::format("_zero{}", c.zero_stage) : "");
                         });

TEST(MlpTensorParallel, MatchesOneRankAtTp2) {
  JobSpec o = testing::tiny_mlp();
  o.run.steps = kEquivalenceSteps;
  o.optimizer.schedule.total = kEquivalenceSteps;
  const std::vector<double> single = testing::train_losses(o);
  o.launch.ranks = 2;
  o.strategy.tensor_parallel = 2;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance, "mlp at tp=2");
}

// The CNN's fully-connected layers split (fc1 column, fc2 row) while its
// convolutions run whole on every tensor rank: the layer-wise plan.
TEST(CnnTensorParallel, MatchesOneRankAtTp2AndDp2Tp2) {
  JobSpec o = testing::tiny_cnn();
  o.run.steps = kEquivalenceSteps;
  o.optimizer.schedule.total = kEquivalenceSteps;
  const std::vector<double> single = testing::train_losses(o);
  o.launch.ranks = 2;
  o.strategy.tensor_parallel = 2;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance, "cnn at tp=2");
  o.launch.ranks = 4;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance, "cnn at dp=2 x tp=2");
}

// The CNN's convolutions split too, as a search or a strategy file places
// them (parallel/split_units.h finds them as lone layers): conv1 by output
// channel (column), conv2 by input channel (row: its bias added by the
// shard of channel 0, the partial outputs summed), fc1 column, fc2 row.
TEST(CnnTensorParallel, ConvolutionsSplitByChannelMatchOneRank) {
  JobSpec o = testing::tiny_cnn();
  o.run.steps = kEquivalenceSteps;
  o.optimizer.schedule.total = kEquivalenceSteps;
  const std::vector<double> single = testing::train_losses(o);
  const nn::Model model = nn::build_model(o.model, o.data.batch, true);
  const std::vector<parallel::SplitUnit> units = parallel::split_units(model.graph);
  std::vector<std::string> names;
  for (const parallel::SplitUnit& u : units) names.push_back(u.name);
  ASSERT_EQ(names, (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2"}));
  EXPECT_EQ(units[0].next, 1);  // conv1 reaches conv2 through its relu and pool
  testing::ScratchDir dir;
  for (int dp : {1, 2}) {
    parallel::Strategy s = parallel::data_tensor_mesh(dp, 2, {"images", "labels"});
    for (size_t u = 0; u < units.size(); ++u) {
      const std::vector<parallel::PlacementSeed> seeds = u % 2 == 0 ? parallel::column_seeds(units[u].layers[0], "tp")
                                                                    : parallel::row_seeds(units[u].layers[0], "tp");
      s.seeds.insert(s.seeds.end(), seeds.begin(), seeds.end());
    }
    // The convolutions' weights are stored split: conv1's (4, 1, 3, 3) by output channel, conv2's (8, 4, 3, 3) by input.
    const parallel::Program p = parallel::lower({.forward = &model.graph, .loss = model.loss}, s, 0);
    std::map<std::string, Shape> local;
    for (const parallel::ParamLayout& param : p.params) local[param.name] = param.shape;
    EXPECT_EQ(local.at("conv1.weight"), Shape({2, 1, 3, 3}));
    EXPECT_EQ(local.at("conv1.bias"), Shape({2}));
    EXPECT_EQ(local.at("conv2.weight"), Shape({8, 2, 3, 3}));
    EXPECT_EQ(local.at("conv2.bias"), Shape({8}));
    const std::string path = dir.file(fmt::format("conv_dp{}_tp2.json", dp));
    std::ofstream(path) << parallel::to_json(s).dump(2);
    o.strategy.strategy_file = path;
    o.strategy.mesh_ranks = o.launch.ranks = 2 * dp;
    testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                                fmt::format("cnn, convolutions split, at dp={} x tp=2", dp));
  }
}

// Per transformer layer, plain tensor parallelism costs exactly two
// allreduces forward (after the row-parallel attention output and MLP) and
// two backward (the column layers' input gradients); sequence parallelism
// turns each into a reduce-scatter / all-gather pair. The cross-entropy
// reduces three row vectors and never gathers the logits.
TEST(TensorParallelLowering, EachLayerCostsTwoCollectivesForwardAndTwoBackward) {
  const nn::GptConfig config{.vocab = 64, .block = 8, .n_layer = 3, .n_head = 4, .n_embd = 32, .dropout = 0.1};
  const nn::Model model = nn::build_gpt(config, 4, config.block, true);
  for (bool sp : {false, true}) {
    const parallel::Strategy s = parallel::tensor_parallel(model.graph, 1, 2, batch_input_names(model), sp);
    const parallel::Program p = parallel::lower({.forward = &model.graph, .loss = model.loss}, s, 0);
    std::map<std::string, int> per_layer;  // "h.1 forward allreduce" -> count
    int loss_reductions = 0, logits_gathers = 0;
    const int tp = s.mesh.axis("tp");
    for (const parallel::Instr& instr : p.instrs) {
      const auto* r = std::get_if<parallel::Reshard>(&instr.op);
      if (r == nullptr || r->axis != tp) continue;
      const Graph& g = p.graph_of(instr.micro_batch);
      const std::string& value = g.value(g.nodes()[static_cast<size_t>(r->node)].inputs.front()).name;
      const std::string kind(parallel::resharding_name(parallel::resharding(r->from, r->to)));
      if (value.rfind("loss.", 0) == 0) ++loss_reductions;
      if (value == "lm_head") ++logits_gathers;
      if (value.rfind("h.", 0) != 0 || kind == "slice") continue;
      if (value.find(".grad:") != std::string::npos) continue;  // a LayerNorm's weight gradient (sequence parallel)
      const bool backward = value.find(".grad") != std::string::npos;
      ++per_layer[fmt::format("{} {} {}", value.substr(0, 3), backward ? "backward" : "forward", kind)];
    }
    for (int layer = 0; layer < config.n_layer; ++layer) {
      const std::string h = fmt::format("h.{}", layer);
      if (!sp) {
        EXPECT_EQ(per_layer[h + " forward allreduce"], 2) << h;
        EXPECT_EQ(per_layer[h + " backward allreduce"], 2) << h;
      } else {
        EXPECT_EQ(per_layer[h + " forward reduce_scatter"], 2) << h;
        EXPECT_EQ(per_layer[h + " forward allgather"], 2) << h;
        EXPECT_EQ(per_layer[h + " backward reduce_scatter"], 2) << h;
        EXPECT_EQ(per_layer[h + " backward allgather"], 2) << h;
        EXPECT_EQ(per_layer[h + " forward allreduce"] + per_layer[h + " backward allreduce"], 0) << h;
      }
    }
    EXPECT_EQ(loss_reductions, 3) << "sequence parallel " << sp;
    EXPECT_EQ(logits_gathers, 0) << "the logits must never be gathered";
  }
}

// Sequence parallelism's LayerNorm gradients are partial sums over tp.
// Lowered with overlap_model_gradients, each is accumulated partial and
// reduced over tp on the tp axis' progress lane once backward completes
// its bucket (the executor's engine of that lane), while backward goes on;
// the run equals the inline one (reduced as each gradient is made), at
// tp=2 alone and dp=2 x tp=2, with gradient accumulation.
TEST(TensorParallelOverlap, LayerNormGradientsOnTheTpProgressLaneEqualTheInlineRun) {
  const nn::GptConfig config{.vocab = 64, .block = 8, .n_layer = 2, .n_head = 4, .n_embd = 32, .dropout = 0.1};
  const nn::Model model = nn::build_gpt(config, 4, config.block, true);
  parallel::Strategy s = parallel::tensor_parallel(model.graph, 1, 2, batch_input_names(model), true);
  s.lowering.overlap_model_gradients = true;
  const parallel::Program p = parallel::lower({.forward = &model.graph, .loss = model.loss}, s, 0);
  const int tp = s.mesh.axis("tp");
  int on_tp_lane = 0, inline_layernorm_reshards = 0;
  for (const parallel::Instr& instr : p.instrs) {
    if (const auto* c = std::get_if<parallel::Collective>(&instr.op); c && c->axis == tp) {
      const bool gradient = p.buffers[static_cast<size_t>(c->input.buffer)].kind == parallel::Buffer::Kind::grad_bucket;
      if (!gradient) continue;
      EXPECT_EQ(instr.lane, (parallel::Lane{.kind = parallel::Lane::Kind::progress, .axis = tp})) << instr.name;
      EXPECT_NE(instr.name.find("ln_"), std::string::npos) << instr.name;
      ++on_tp_lane;
    }
    if (const auto* r = std::get_if<parallel::Reshard>(&instr.op)) {
      const Graph& g = p.graph_of(instr.micro_batch);
      const std::string& value = g.value(g.nodes()[static_cast<size_t>(r->node)].inputs.front()).name;
      if (value.find("ln_") != std::string::npos && value.find(".grad:") != std::string::npos) ++inline_layernorm_reshards;
    }
  }
  EXPECT_EQ(on_tp_lane, 2 * (2 * config.n_layer + 1)) << "a weight and a bias per LayerNorm";
  EXPECT_EQ(inline_layernorm_reshards, 0);

  for (int ranks : {2, 4}) {
    JobSpec o = gpt_job(4);
    o.run.steps = o.optimizer.schedule.total = 10;
    o.strategy.micro_batches = 2;
    o.launch.ranks = ranks;
    o.strategy.tensor_parallel = 2;
    o.strategy.sequence_parallel = true;
    const std::vector<double> inline_losses = testing::train_losses(o);
    o.strategy.overlap_model_gradients = true;
    testing::expect_same_losses(inline_losses, testing::train_losses(o), kEquivalenceTolerance,
                                fmt::format("LayerNorm gradients on the tp progress lane, {} ranks", ranks));
  }
}

// A checkpoint saved under one strategy resumes under another: dp=4 ->
// tp=2 -> dp=2 x tp=2 (ZeRO-1) -> dp=3 (ZeRO-3) -> 1 rank, 20 steps each,
// optimizer state included: each rank reads its runs from the shard files
// the previous strategy's ranks wrote.
// Each resumed segment matches an uninterrupted run of its own strategy.
TEST(TensorParallelCheckpoint, ResumesUnderEveryOtherStrategy) {
  struct Stage {
    const char* name;
    int ranks, tp, zero_stage;
  };
  const std::vector<Stage> chain{{"dp=4", 4, 1, 0},
                                 {"tp=2", 2, 2, 0},
                                 {"dp=2 x tp=2, ZeRO-1", 4, 2, 1},
                                 {"dp=3 x tp=1, ZeRO-3", 3, 1, 3},
                                 {"1 rank", 1, 1, 0}};
  constexpr int kSegment = 20;
  JobSpec base = gpt_job(4);
  base.run.steps = kSegment * static_cast<int64_t>(chain.size());
  base.optimizer.schedule.total = base.run.steps;
  base.run.eval_every = 0;
  std::vector<testing::ResumeLink> links;
  for (const Stage& s : chain) {
    JobSpec o = base;
    o.launch.ranks = s.ranks;
    o.strategy.tensor_parallel = s.tp;
    o.strategy.zero_stage = s.zero_stage;
    links.push_back({s.name, o});
  }
  testing::expect_resumed_segments_match(links, kSegment, kEquivalenceTolerance);
}

// Each rank saves only what no other rank saves: over the shard files,
// every parameter and optimizer slot has each of its elements exactly once,
// and the runs read back whole equal the gathered model.safetensors.
// Replicated copies come from coordinate 0 of the replicating axes: at
// dp=2 x tp=2 the two ranks of dp coordinate 0 write; under ZeRO every
// rank holds its own optimizer runs and writes them.
TEST(TensorParallelCheckpoint, EveryElementIsSavedOnceWithItsBox) {
  struct Case {
    const char* name;
    int zero_stage;
    std::vector<int> writers;
  };
  for (const Case& c : {Case{"dp=2 x tp=2", 0, {0, 1}}, Case{"dp=2 x tp=2, ZeRO-1", 1, {0, 1, 2, 3}},
                        Case{"dp=2 x tp=2, ZeRO-3", 3, {0, 1, 2, 3}}}) {
    testing::ScratchDir dir;
    JobSpec o = gpt_job(4);
    o.run.steps = 2;
    o.optimizer.schedule.total = 2;
    o.launch.ranks = 4;
    o.strategy.tensor_parallel = 2;
    o.strategy.zero_stage = c.zero_stage;
    o.checkpoint.save = dir.file("ckpt");
    testing::train_losses(o);
    std::vector<int> writers;
    std::map<std::string, int64_t> saved, global;
    for (int r = 0; r < 4; ++r) {
      const std::string path = fmt::format("{}/shards/rank{}.safetensors", o.checkpoint.save, r);
      if (!std::filesystem::exists(path)) continue;
      writers.push_back(r);
      const SafetensorsReader reader(path);
      EXPECT_EQ(reader.metadata().at("mesh"), "{dp:2, tp:2}") << c.name;
      for (const SafetensorsReader::Entry& e : reader.entries()) {
        const nlohmann::json box = nlohmann::json::parse(reader.metadata().at(e.name));
        saved[e.name] += box.at("end").get<int64_t>() - box.at("begin").get<int64_t>();
        global[e.name] = Shape(box.at("global").get<std::vector<int64_t>>()).numel();
      }
    }
    EXPECT_EQ(writers, c.writers) << c.name;
    EXPECT_EQ(saved, global) << c.name << ": some element is saved twice or not at all";
    const Checkpoint checkpoint = load_checkpoint(o.checkpoint.save);
    const SafetensorsFile model = load_model_weights(o.checkpoint.save);
    EXPECT_EQ(saved.size(), 3 * model.tensors.size()) << c.name << ": each parameter and its two AdamW slots";
    for (const auto& [name, whole] : model.tensors) {
      const Tensor from_shards = checkpoint.shards.read_whole(name, whole.shape());
      EXPECT_EQ(std::memcmp(from_shards.f32(), whole.f32(), whole.nbytes()), 0) << c.name << ": " << name;
    }
  }
}

// The bytes rank 0 sends along tp in a step, counted by its communicator,
// equal the ring formulas of docs/collectives.md summed over the tp
// collectives of its program: 2(p-1)/p·n·4 per allreduce (n = b·s·h for
// the layers' activations), (p-1)/p·n·4 per reduce-scatter or allgather.
// Per transformer layer sequence parallelism moves exactly what plain
// tensor parallelism does.
TEST(TensorParallelBytes, CountedBytesEqualTheRingFormulas) {
  std::map<bool, double> layer_bytes;
  for (bool sp : {false, true}) {
    JobSpec o = gpt_job(4);
    o.run.steps = 2;
    o.optimizer.schedule.total = 2;
    o.launch.ranks = 2;
    o.strategy.tensor_parallel = 2;
    o.strategy.sequence_parallel = sp;
    o.strategy.collective.algorithm = comm::Algorithm::ring;
    std::ostringstream log;
    const JobResult result = train(o, log);

    const nn::Model model = make_task(o.model, o.data, o.run.seed)->build(o.data.batch, true);
    const parallel::Strategy s = parallel::tensor_parallel(model.graph, 1, 2, batch_input_names(model), sp);
    const parallel::Program p = parallel::lower({.forward = &model.graph, .loss = model.loss}, s, 0);
    const int tp = s.mesh.axis("tp");
    const double ranks = 2, pass = (ranks - 1) / ranks;
    double expected = 0;
    for (const parallel::Instr& instr : p.instrs) {
      if (const auto* c = std::get_if<parallel::Collective>(&instr.op); c != nullptr && c->axis == tp)
        expected += 2 * pass * 4.0 * static_cast<double>(c->input.count);  // the gradient norm's allreduce
      const auto* r = std::get_if<parallel::Reshard>(&instr.op);
      if (r == nullptr || r->axis != tp) continue;
      const Graph& g = p.graph_of(instr.micro_batch);
      const Node& node = g.nodes()[static_cast<size_t>(r->node)];
      const double in = static_cast<double>(g.spec(node.inputs.front()).shape.numel());
      const double out = static_cast<double>(g.spec(node.outputs.front()).shape.numel());
      double bytes = 0;
      switch (parallel::resharding(r->from, r->to)) {
        case parallel::Resharding::allreduce: bytes = 2 * pass * 4 * in; break;
        case parallel::Resharding::reduce_scatter: bytes = pass * 4 * in; break;
        case parallel::Resharding::allgather: bytes = pass * 4 * out; break;
        default: break;
      }
      expected += bytes;
      if (g.value(node.inputs.front()).name.rfind("h.", 0) == 0 &&
          g.value(node.inputs.front()).name.find(".grad:") == std::string::npos)
        layer_bytes[sp] += bytes;
    }
    EXPECT_EQ(static_cast<double>(result.data_parallel->bytes_per_axis.at("tp")), expected)
        << (sp ? "with" : "without") << " sequence parallelism";
  }
  EXPECT_EQ(layer_bytes[false], layer_bytes[true]);
  EXPECT_GT(layer_bytes[false], 0);
}

TEST(TensorParallelLowering, HeadsTheTensorAxisDoesNotDivideAreANamedError) {
  JobSpec o = gpt_job(4);
  o.launch.ranks = 3;
  o.strategy.tensor_parallel = 3;
  testing::expect_train_error(o, "does not divide n_head=4");
}

}  // namespace
}  // namespace px
