// The planner's searches: the grid ranks every candidate by its replayed
// step and rejects, with the reason, what does not fit; the stage search's
// screen agrees with the replay of the Programs it verifies, balances its
// cuts, and moves blocks off the stages that hold more micro-batches when
// memory is short.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <numeric>

#include "core/error.h"
#include "nn/cnn.h"
#include "nn/gpt.h"
#include "nn/mlp.h"
#include "parallel/compose.h"
#include "plan/mcmc_search.h"
#include "graph/precision.h"
#include "plan/search.h"
#include "plan/simulate.h"
#include "plan/stage_probe.h"
#include "nn/model.h"
#include "testing/time_scale.h"

namespace px::plan {
namespace {

PlanRequest gpt_request(const ClusterSpec& cluster, int ranks, int64_t batch, int layers) {
  const nn::GptConfig config{.vocab = 512, .block = 64, .n_layer = layers, .n_head = 4, .n_embd = 128};
  const nn::Model model = nn::build_gpt(config, batch, config.block, true);
  return {.build = [config](int64_t rows, int64_t blocks) {
            nn::GptConfig c = config;
            if (blocks > 0) c.n_layer = blocks;
            return nn::build_gpt(c, rows, c.block, true);
          },
          .batch_inputs = batch_input_names(model),
          .batch = batch,
          .ranks = ranks,
          .cluster = &cluster,
          .budget_seconds = 60,
          .space = {.precision = Precision::bf16}};
}

TEST(PlanGrid, RanksEveryCandidateByItsReplayAndNamesWhatDoesNotFit) {
  ClusterSpec cluster = cluster_named("dgx-a100");
  PlanRequest request = gpt_request(cluster, 4, 16, 4);
  request.method = "grid";
  // Every mesh, ZeRO stage and micro-batch count up to 4; one schedule, no recompute.
  request.space.schedules = false;
  request.space.recompute = false;
  request.space.max_micro_batches = 4;
  const PlanResult roomy = plan(request);
  EXPECT_EQ(roomy.method, "grid");
  EXPECT_EQ(roomy.evaluated, roomy.considered);
  EXPECT_FALSE(roomy.budget_exhausted);
  ASSERT_GT(roomy.ranked.size(), 10u);
  EXPECT_TRUE(roomy.rejected.empty()) << (roomy.rejected.empty() ? ""
                                                                 : roomy.rejected.front().description + ": " +
                                                                       roomy.rejected.front().rejected);
  for (size_t i = 1; i < roomy.ranked.size(); ++i)
    EXPECT_LE(roomy.ranked[i - 1].step_seconds, roomy.ranked[i].step_seconds);
  for (const Candidate& c : roomy.ranked) EXPECT_TRUE(c.simulated) << c.description;
  // Its figures are the simulator's for that strategy.
  const nn::Model model = request.build(16, 0);
  const Candidate again = evaluate(request, model, roomy.best().strategy, *estimator_for(request));
  EXPECT_DOUBLE_EQ(again.step_seconds, roomy.best().step_seconds);

  // Memory between the smallest and the largest candidate's peak: some are rejected, with their need.
  double low = 1e300, high = 0;
  for (const Candidate& c : roomy.ranked) {
    low = std::min(low, c.peak_bytes);
    high = std::max(high, c.peak_bytes);
  }
  cluster.device.memory_bytes = (low + high) / 2;
  const PlanResult tight = plan(request);
  ASSERT_FALSE(tight.rejected.empty());
  ASSERT_FALSE(tight.ranked.empty());
  for (const Candidate& c : tight.ranked) EXPECT_LE(c.peak_bytes, cluster.device.memory_bytes);
  EXPECT_NE(tight.rejected.front().rejected.find("a device, the device has"), std::string::npos)
      << tight.rejected.front().rejected;
  // Nothing fits: a named error that names the closest.
  cluster.device.memory_bytes = low / 2;
  try {
    plan(request).best();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no strategy fits; the closest"), std::string::npos) << e.what();
  }
}

TEST(PlanBudget, EveryMethodStopsAtTheBudgetAndSaysHowMuchItCovered) {
  // A 128-layer, 25600-wide GPT on 3072 A100s: tens of thousands of
  // candidates, each pipeline up to 128 stages x 1024 micro-batches.
  const ClusterSpec cluster = cluster_named("dgx-a100:384");
  const nn::GptConfig config{.vocab = 51200, .block = 2048, .n_layer = 128, .n_head = 160, .n_embd = 25600};
  const nn::Model model = nn::build_gpt(config, 3072, config.block, true);
  PlanRequest request{.build = [config](int64_t rows, int64_t blocks) {
                        nn::GptConfig c = config;
                        if (blocks > 0) c.n_layer = blocks;
                        return nn::build_gpt(c, rows, c.block, true);
                      },
                      .batch_inputs = batch_input_names(model),
                      .batch = 3072,
                      .ranks = 3072,
                      .cluster = &cluster,
                      // Scaled like the bound: a sanitized build reaches as many candidates.
                      .budget_seconds = 0.3 * testing::time_scale(),
                      .space = {.precision = Precision::bf16}};
  for (const std::string method : {"auto", "grid", "alpa"}) {
    request.method = method;
    const auto start = std::chrono::steady_clock::now();
    const PlanResult result = plan(request);
    EXPECT_LT(seconds_since(start), request.budget_seconds + 0.5 * testing::time_scale()) << method;
    EXPECT_TRUE(result.budget_exhausted) << method;
    EXPECT_EQ(result.budget_seconds, request.budget_seconds);
    EXPECT_GT(result.considered, 10000) << method;
    // Past the budget with nothing estimated is allowed (the error below
    // says so), but in a release build 0.3 s reaches some: alpa's first
    // candidate takes under 0.05 s there. Not under the sanitizers, whose
    // allocator makes the first lowerings 10x slower or more, beyond what
    // the time scale covers on a loaded machine (CI saw 0 at 1.5 s). A grid
    // candidate may take the whole budget.
    if (method != "grid" && !testing::under_sanitizers()) EXPECT_GT(result.evaluated, 0) << method;
    EXPECT_LT(result.evaluated, result.considered) << method;
    EXPECT_NEAR(result.coverage(), static_cast<double>(result.evaluated) / result.considered, 1e-12);
    if (result.ranked.empty()) {  // nothing that fits among what it reached: the error says the search was cut
      try {
        result.best();
        FAIL() << method;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(PlanBudget, APassedDeadlineGivesUpTheReplayOfACandidate) {
  const ClusterSpec cluster = cluster_named("dgx-a100");
  const PlanRequest request = gpt_request(cluster, 4, 16, 4);
  const nn::Model model = request.build(16, 0);
  const parallel::Strategy strategy = parallel::data_parallel(4, request.batch_inputs);
  const std::unique_ptr<CostEstimator> estimator = estimator_for(request);
  const Deadline passed{.seconds = 0};
  EXPECT_THROW(evaluate(request, model, strategy, *estimator, &passed), DeadlinePassed);
  const Deadline open{.seconds = 60};
  EXPECT_GT(evaluate(request, model, strategy, *estimator, &open).step_seconds, 0);
}

TEST(PlanStages, TheScreenAgreesWithTheReplayOfWhatItVerifies) {
  const ClusterSpec cluster = cluster_named("dgx-a100:2");
  PlanRequest request = gpt_request(cluster, 16, 64, 8);
  request.method = "alpa";
  request.verify = 12;
  const PlanResult result = plan(request);
  EXPECT_EQ(result.method, "alpa");
  int verified = 0;
  for (const auto* list : {&result.ranked, &result.rejected})
    for (const Candidate& c : *list) {
      if (!c.simulated) continue;
      ++verified;
      // 0.35: pure data parallelism over both nodes (dp=16) is among the
      // verified since the plan costs the bf16 Program itself, and the
      // screen misses 31-32% of its step (its reduction over the
      // inter-node link behind the last backward; 27-29% before a
      // collective across nodes drove one NIC per rank of a node, which
      // shortened the screen's reductions more than the replay's step);
      // it missed as much before (1.68 ms screened, 2.3 ms replayed at
      // 1210a9a), unverified.
      EXPECT_NEAR(c.screened_step_seconds / c.step_seconds, 1, 0.35) << c.description;
      EXPECT_NEAR(c.screened_peak_bytes / c.peak_bytes, 1, 0.25) << c.description;
    }
  EXPECT_EQ(verified, 12);
  // Every stage (every chunk of an interleaved one) gets blocks; together all of them.
  int interleaved = 0;
  for (const Candidate& c : result.ranked) {
    if (c.strategy.pipeline_ranks() <= 1) continue;
    interleaved += c.strategy.pipeline.schedule == parallel::PipelineKind::interleaved;
    EXPECT_EQ(static_cast<int>(c.strategy.pipeline.stage_cuts.size()),
              c.strategy.pipeline_ranks() * c.strategy.pipeline.virtual_stages - 1)
        << c.description;
  }
  EXPECT_GT(interleaved, 0) << "the screen tries Megatron-LM's interleaved schedule";
}

TEST(PlanStages, ShortMemoryMovesBlocksOffTheStagesHoldingMoreMicroBatches) {
  ClusterSpec cluster = cluster_named("dgx-a100");
  PlanRequest request = gpt_request(cluster, 4, 64, 16);
  request.method = "alpa";
  request.verify = 0;
  request.space.tensor = false;
  request.space.zero = false;
  request.space.recompute = false;
  request.space.schedules = false;  // 1F1B: stage s holds P - s micro-batches
  auto four_stages = [&](const PlanResult& r) -> const Candidate* {
    for (const Candidate& c : r.ranked)
      if (c.description.rfind("pp=4 dp=1 tp=1 M=16 1f1b", 0) == 0) return &c;
    return nullptr;
  };
  const PlanResult first = plan(request);
  const Candidate* roomy = four_stages(first);
  ASSERT_NE(roomy, nullptr);
  // Just below what the balanced cut needs: stage 0 (4 micro-batches in flight) must shed blocks.
  cluster.device.memory_bytes = roomy->peak_bytes * 0.97;
  const PlanResult tight = plan(request);
  const Candidate* shifted = four_stages(tight);
  ASSERT_NE(shifted, nullptr) << "no 4-stage cut fits";
  EXPECT_LE(shifted->peak_bytes, cluster.device.memory_bytes);
  // Stage 0 ("h.0" up to the first cut) holds fewer blocks.
  auto first_cut = [](const Candidate& c) { return std::stoi(c.strategy.pipeline.stage_cuts.front().substr(2)); };
  EXPECT_LT(first_cut(*shifted), first_cut(*roomy)) << roomy->description << " -> " << shifted->description;
}

// OptCNN's case: a CNN whose fully-connected layer dwarfs its convolutions,
// on a slow link. The dynamic program splits that layer (its gradient is
// then never reduced whole) and the replay confirms it beats plain data
// parallelism; a model without fc layers is a named error.
TEST(PlanLayers, ASlowLinkSplitsTheLargeFullyConnectedLayer) {
  ClusterSpec cluster = cluster_named("dgx-a100");
  cluster.intra_node.bandwidth = 125e6;  // 1 Gb/s
  cluster.inter_node.bandwidth = 125e6;
  const nn::CnnConfig config{.channels1 = 8, .channels2 = 16, .hidden = 2048, .classes = 10};
  const nn::Model model = nn::build_cnn(config, 64);
  PlanRequest request{.build = [config](int64_t rows, int64_t) { return nn::build_cnn(config, rows); },
                      .batch_inputs = batch_input_names(model),
                      .batch = 64,
                      .ranks = 4,
                      .cluster = &cluster,
                      .method = "layerwise"};
  const PlanResult result = plan(request);
  EXPECT_EQ(result.method, "layerwise");
  const Candidate& best = result.best();
  EXPECT_NE(best.description.find("fc1=column"), std::string::npos) << best.description;
  EXPECT_TRUE(best.simulated);
  const Candidate* dp = nullptr;
  for (const Candidate& c : result.ranked)
    if (c.description == "pp=1 dp=4 tp=1") dp = &c;
  ASSERT_NE(dp, nullptr);
  EXPECT_GT(dp->step_seconds / best.step_seconds, 1.3);

  // A GPT's units are its blocks' attention and MLP (found by structure, parallel/split_units.h),
  // each whole or split as Megatron's pair. Across two nodes joined by 1 Gb/s, with NVLink
  // inside each, splitting them pays: their gradients cross the slow link halved.
  ClusterSpec nodes = cluster_named("dgx-a100:2");
  nodes.devices_per_node = 2;
  nodes.inter_node.bandwidth = 125e6;
  const nn::GptConfig wide{.vocab = 512, .block = 64, .n_layer = 4, .n_head = 8, .n_embd = 512};
  const nn::Model gpt_model = nn::build_gpt(wide, 16, wide.block, true);
  const PlanRequest gpt{.build = [wide](int64_t rows, int64_t) { return nn::build_gpt(wide, rows, wide.block, true); },
                        .batch_inputs = batch_input_names(gpt_model),
                        .batch = 16,
                        .ranks = 4,
                        .cluster = &nodes,
                        .method = "layerwise",
                        .space = {.precision = Precision::bf16}};
  const PlanResult blocks = plan(gpt);
  std::string placed;
  for (const auto* list : {&blocks.ranked, &blocks.rejected})
    for (const Candidate& c : *list)
      if (c.description.find("layer-wise") != std::string::npos) placed = c.description;
  EXPECT_NE(placed.find("h.0.attn=split"), std::string::npos) << placed;
}

// Delta simulation re-times only what a proposal changed; it must reach the
// same figures as re-timing everything, so the same chain (same seed, same
// proposals) takes the same steps and ends at the same placement. The
// placement it finds beats replicating every layer.
TEST(PlanMcmc, DeltaSimulationWalksTheSameChainAsFullSimulation) {
  // Two nodes of two devices on a 1 Gb/s network: reducing whole gradients across nodes is dear.
  ClusterSpec cluster = cluster_named("dgx-a100:2");
  cluster.devices_per_node = 2;
  cluster.inter_node.bandwidth = 125e6;
  const nn::GptConfig config{.vocab = 512, .block = 64, .n_layer = 4, .n_head = 8, .n_embd = 512};
  const nn::Model model = nn::build_gpt(config, 16, config.block, true);
  PlanRequest request{.build = [config](int64_t rows, int64_t) { return nn::build_gpt(config, rows, config.block, true); },
                      .batch_inputs = batch_input_names(model),
                      .batch = 16,
                      .ranks = 4,
                      .cluster = &cluster,
                      .space = {.precision = Precision::bf16}};
  const RooflineEstimator estimator(cluster);
  const Deadline unbounded{};  // the chains stop at proposals_per_mesh
  McmcSearch delta{.request = &request, .estimator = &estimator, .model = &model, .delta = true,
                   .proposals_per_mesh = 400};
  McmcSearch full = delta;
  full.delta = false;
  const std::vector<Candidate> a = search_mcmc(delta, unbounded);
  const std::vector<Candidate> b = search_mcmc(full, unbounded);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].description, b[i].description);
    EXPECT_DOUBLE_EQ(a[i].screened_step_seconds, b[i].screened_step_seconds);
    EXPECT_DOUBLE_EQ(a[i].step_seconds, b[i].step_seconds);
  }
  EXPECT_EQ(delta.proposals, full.proposals);
  // Its best on two tensor ranks is faster, replayed, than the same mesh with every layer replicated.
  const Candidate replicated = evaluate(request, model, [&] {
    parallel::Strategy s = parallel::data_parallel(2, request.batch_inputs);
    s.mesh = parallel::DeviceMesh({{"dp", 2}, {"tp", 2}});
    return s;
  }(), estimator);
  EXPECT_LT(a.front().step_seconds, replicated.step_seconds) << a.front().description;
}

}  // namespace
}  // namespace px::plan

namespace px::plan {
namespace {

// Two blocks h.0, h.1 of linear and relu, a linear head: relu's output,
// crossing a cut before h.1, is read past it only by h.1's GEMMs (bf16).
nn::Model relu_chain(int64_t rows, int64_t blocks) {
  nn::Model m;
  Graph& g = m.graph;
  m.inputs = g.input("x", {Shape{rows, 24}});
  ValueId h = m.inputs;
  for (int64_t b = 0; b < std::max<int64_t>(blocks, 1); ++b) {
    const ValueId w = g.param(fmt::format("h.{}.fc.weight", b), {Shape{24, 24}}, {ParamInit::Kind::normal, 0.2}, true);
    h = g.add1("relu", {g.add1("linear", {h, w}, {}, fmt::format("h.{}.fc", b))}, {}, fmt::format("h.{}.act", b));
  }
  const ValueId head = g.param("head.weight", {Shape{24, 10}}, {ParamInit::Kind::normal, 0.2}, true);
  m.logits = g.add1("linear", {h, head}, {}, "head");
  m.targets = g.input("y", {Shape{rows}, DType::i32});
  m.loss = g.add1("cross_entropy", {m.logits, m.targets}, {{"scale", 1.0 / static_cast<double>(rows)}}, "loss");
  return m;
}

// The stage search's probe counts a cut's bytes as the Program's Send
// carries them: relu's output in bf16 forward, its gradient fp32 back.
TEST(StageProbe, CountsACutInTheDtypeTheProgramSendsIt) {
  ClusterSpec cluster = cluster_named("dgx-a100");
  const PlanRequest request{.build = relu_chain, .batch_inputs = {"x", "y"}, .batch = 8, .ranks = 2,
                            .cluster = &cluster, .space = {.precision = Precision::bf16}};
  const ProbeCosts costs = probe(request, *estimator_for(request),
                                 {.tp = 1, .sp = false, .rows = 8, .recompute = parallel::Recompute::none}, Deadline{});
  ASSERT_TRUE(costs.error.empty()) << costs.error;
  EXPECT_EQ(costs.boundary, 8 * 24 * 2);
  EXPECT_EQ(costs.boundary_gradient, 8 * 24 * 4);

  const nn::Model model = relu_chain(8, 2);
  const parallel::Strategy strategy =
      parallel::compose({.pipeline_parallel = 2, .pipeline = {.stage_cuts = {"h.1.fc"}}, .precision = Precision::bf16},
                        {.graph = &model.graph, .batch_inputs = {"x", "y"}, .ranks = 2});
  const std::vector<parallel::Program> programs = lower_all({.forward = &model.graph, .loss = model.loss}, strategy);
  double sent[2] = {0, 0};  // per rank, one micro-batch
  for (size_t r = 0; r < 2; ++r)
    for (const parallel::Instr& instr : programs[r].instrs)
      if (std::holds_alternative<parallel::Send>(instr.op)) sent[r] += static_cast<double>(instr.wire.total());
  EXPECT_EQ(sent[0], costs.boundary) << "the first stage sends the activation";
  EXPECT_EQ(sent[1], costs.boundary_gradient) << "the second sends its gradient back";
}

}  // namespace
}  // namespace px::plan
