// Tensor parallelism on imported graphs, found by structure
// (parallel/split_units.h): the GPT fixture's attention and MLP are found
// as Megatron blocks and `--tp` seeds them as the hand-written strategy
// file does; the layer-wise and MCMC searches place its GEMMs on a tensor
// axis, and the plan they return trains as one rank does within 1e-5
// (tests/parallel/strategy_equivalence.h); the CNN fixture's convolutions
// are lone layers the searches place too; every plan method works on
// every fixture, and the stage search's plans of the GPT and the CNN
// (cut by cost at node boundaries) train as one rank does.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/build_model.h"
#include "nn/gpt.h"
#include "nn/mlp.h"
#include "nn/onnx/onnx_import.h"
#include "parallel/compose.h"
#include "parallel/split_units.h"
#include "parallel/strategy_equivalence.h"
#include "parallel/tensor_parallel.h"
#include "plan/cluster.h"
#include "plan/estimator.h"
#include "plan/layer_search.h"
#include "plan/mcmc_search.h"
#include "plan/search.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"
#include "testing/time_scale.h"

namespace px {
namespace {

using testing::kEquivalenceSteps;
using testing::kEquivalenceTolerance;

std::string fixture_path(const std::string& name) { return std::string(PX_ONNX_FIXTURES) + "/" + name; }

std::vector<std::string> unit_names(const Graph& graph) {
  std::vector<std::string> names;
  for (const parallel::SplitUnit& u : parallel::split_units(graph))
    names.push_back(u.name + (u.block() ? fmt::format(" block/{}", u.groups) : ""));
  return names;
}

TEST(OnnxSplitUnits, FindTheGptFixturesBlocksAndItsHeadByStructure) {
  for (const char* file : {"gpt.onnx", "gpt_opset13.onnx"}) {
    const nn::Model model = nn::import_onnx({.path = fixture_path(file)}, 4, true);
    EXPECT_EQ(unit_names(model.graph),
              (std::vector<std::string>{"h.0.attn block/3", "h.0.mlp block/1", "h.1.attn block/3", "h.1.mlp block/1",
                                        "lm_head"}))
        << file;
  }
  // The MLP's two Gemm layers are a chain: fc1 reaches fc2 through its relu.
  const nn::Model mlp = nn::import_onnx({.path = fixture_path("mlp.onnx")}, 4, true);
  const std::vector<parallel::SplitUnit> units = parallel::split_units(mlp.graph);
  ASSERT_EQ(units.size(), 2u);
  EXPECT_EQ(units[0].name, "fc1");
  EXPECT_EQ(units[0].next, 1);
  EXPECT_EQ(units[0].layers[0].out_dim, 0);  // torch's (out, in) weight under Gemm's transB
}

// The CNN's convolutions are lone layers (their own bias inside, torch's
// (out, in, kh, kw) weight: column is S(0)), a chain conv1 -> conv2 ->
// fc1 -> fc2; `--tp` still splits only the fully-connected pair.
TEST(OnnxSplitUnits, FindTheCnnFixturesConvolutionsAsLoneLayers) {
  const nn::Model cnn = nn::import_onnx({.path = fixture_path("cnn.onnx")}, 4, true);
  const std::vector<parallel::SplitUnit> units = parallel::split_units(cnn.graph);
  EXPECT_EQ(unit_names(cnn.graph), (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2"}));
  ASSERT_EQ(units.size(), 4u);
  for (size_t u = 0; u < 2; ++u) {
    const parallel::GemmLayer& conv = units[u].layers.front();
    EXPECT_TRUE(conv.conv) << conv.name;
    EXPECT_EQ(conv.out_dim, 0) << conv.name;
    EXPECT_EQ(conv.bias, conv.name + ".bias");
    EXPECT_EQ(units[u].next, static_cast<int>(u) + 1) << conv.name;
  }
  std::vector<std::string> seeds;
  for (const parallel::PlacementSeed& s : parallel::megatron_seeds(cnn.graph, "tp", false))
    seeds.push_back(s.value + " " + s.placement.str());
  EXPECT_EQ(seeds, (std::vector<std::string>{"fc1.weight S(0)", "fc1.bias S(0)", "fc2.weight S(1)"}));
}

TEST(OnnxSplitUnits, TensorParallelSeedsAreTheHandWrittenMegatronStrategy) {
  const nn::Model model = nn::import_onnx({.path = fixture_path("gpt.onnx")}, 4, true);
  const parallel::Strategy file = parallel::load_strategy(fixture_path("gpt_megatron_tp2.json"));
  std::vector<parallel::PlacementSeed> expected;
  for (const parallel::PlacementSeed& s : file.seeds)
    if (s.axis == "tp") expected.push_back(s);
  std::vector<parallel::PlacementSeed> found = parallel::megatron_seeds(model.graph, "tp", false);
  auto by_name = [](const auto& a, const auto& b) { return a.value < b.value; };
  std::sort(found.begin(), found.end(), by_name);
  std::sort(expected.begin(), expected.end(), by_name);
  EXPECT_EQ(found, expected);
}

TEST(OnnxSplitUnits, BuiltInModelsKeepMegatronsLayout) {
  const nn::Model gpt = nn::build_gpt({.vocab = 64, .block = 8, .n_layer = 2, .n_head = 2, .n_embd = 16}, 4, 8, true);
  std::vector<std::string> seeds;
  for (const parallel::PlacementSeed& s : parallel::megatron_seeds(gpt.graph, "tp", false))
    seeds.push_back(s.value + " " + s.placement.str());
  EXPECT_EQ(seeds, (std::vector<std::string>{
                       "wte.weight S(0)", "h.0.attn.c_attn.weight S(1,3)", "h.0.attn.c_attn.bias S(0,3)",
                       "h.0.attn.c_proj.weight S(0)", "h.0.mlp.c_fc.weight S(1)", "h.0.mlp.c_fc.bias S(0)",
                       "h.0.mlp.c_proj.weight S(0)", "h.1.attn.c_attn.weight S(1,3)", "h.1.attn.c_attn.bias S(0,3)",
                       "h.1.attn.c_proj.weight S(0)", "h.1.mlp.c_fc.weight S(1)", "h.1.mlp.c_fc.bias S(0)",
                       "h.1.mlp.c_proj.weight S(0)"}));
  // An MLP of three layers: fc1 column, fc2 row, the odd last one whole.
  const nn::Model mlp = nn::build_mlp({.hidden = {32, 32}}, 4);
  seeds.clear();
  for (const parallel::PlacementSeed& s : parallel::megatron_seeds(mlp.graph, "tp", false))
    seeds.push_back(s.value + " " + s.placement.str());
  EXPECT_EQ(seeds, (std::vector<std::string>{"fc1.weight S(1)", "fc1.bias S(0)", "fc2.weight S(0)"}));
}

// Sequence parallelism seeds the residual stream by structure too: where
// it leaves the embedding (above the built-in GPT's embedding dropout) and
// each block's row-layer output, the values the built-in GPT names.
TEST(OnnxSplitUnits, SequenceParallelSeedsTheResidualStreamByStructure) {
  const nn::Model gpt = nn::build_gpt(
      {.vocab = 64, .block = 8, .n_layer = 2, .n_head = 2, .n_embd = 16, .dropout = 0.1}, 4, 8, true);
  auto activation = [](const Graph& g, const std::string& name) -> const Value* {
    for (const Value& v : g.values())
      if (v.name == name && v.kind == Value::Kind::activation) return &v;
    return nullptr;
  };
  std::vector<std::string> stream;
  for (const parallel::PlacementSeed& s : parallel::megatron_seeds(gpt.graph, "tp", true))
    if (activation(gpt.graph, s.value)) stream.push_back(s.value + " " + s.placement.str());
  EXPECT_EQ(stream, (std::vector<std::string>{"embed S(1)", "h.0.attn.c_proj.add_bias S(1)",
                                              "h.0.mlp.c_proj.add_bias S(1)", "h.1.attn.c_proj.add_bias S(1)",
                                              "h.1.mlp.c_proj.add_bias S(1)"}));
  const nn::Model onnx = nn::import_onnx({.path = fixture_path("gpt.onnx")}, 4, true);
  const std::vector<parallel::PlacementSeed> seeds = parallel::megatron_seeds(onnx.graph, "tp", true);
  const std::vector<parallel::PlacementSeed> tp = parallel::megatron_seeds(onnx.graph, "tp", false);
  ASSERT_EQ(seeds.size(), tp.size() + 5);  // the embedding's sum and 4 row outputs
  for (size_t i = tp.size(); i < seeds.size(); ++i) {
    EXPECT_EQ(seeds[i].placement, Placement::S(1)) << seeds[i].value;
    const Value* v = activation(onnx.graph, seeds[i].value);
    ASSERT_NE(v, nullptr) << seeds[i].value;
    EXPECT_EQ(v->spec.shape, Shape({4, 8, 16})) << seeds[i].value;
  }
  // A model without transformer blocks has no stream to split.
  const nn::Model mlp = nn::import_onnx({.path = fixture_path("mlp.onnx")}, 4, true);
  EXPECT_THROW(
      {
        try {
          parallel::megatron_seeds(mlp.graph, "tp", true);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("no transformer block"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

JobSpec gpt_job() {
  JobSpec o = testing::tiny_cnn();
  o.model.kind = fixture_path("gpt.onnx");
  o.data.path = testing::shared_text();
  o.run.steps = kEquivalenceSteps;
  o.optimizer.schedule = {.kind = "cosine", .lr = 1e-3, .warmup = 0, .total = kEquivalenceSteps, .min_ratio = 0.0};
  o.optimizer.update = {.kind = "adamw", .weight_decay = 0.01};
  return o;
}

TEST(OnnxTensorParallel, TpFlagOnTheGptFixtureMatchesOneRank) {
  JobSpec o = gpt_job();
  const auto& single = testing::reference_losses("onnx gpt", o);
  ASSERT_EQ(single.size(), static_cast<size_t>(kEquivalenceSteps));
  o.launch.ranks = 4;
  o.strategy.tensor_parallel = 2;  // mesh {dp:2, tp:2}, the seeds found by structure
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance, "gpt.onnx --ranks 4 --tp 2");
}

// Megatron's sequence parallelism on the imported GPT: LayerNorms, the
// residual adds and the embedding's sum run on sequence shards, the row
// layers' allreduces become reduce-scatters and all-gathers.
TEST(OnnxTensorParallel, SequenceParallelOnTheGptFixtureMatchesOneRank) {
  JobSpec o = gpt_job();
  const auto& single = testing::reference_losses("onnx gpt", o);
  ASSERT_EQ(single.size(), static_cast<size_t>(kEquivalenceSteps));
  o.launch.ranks = 4;
  o.strategy.tensor_parallel = 2;
  o.strategy.sequence_parallel = true;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                              "gpt.onnx --ranks 4 --tp 2 --sequence-parallel");
}

// The placements the layer-wise or MCMC search (`method`) finds for `o`'s
// model on `ranks` devices of `cluster`, best first (no deadline).
std::vector<plan::Candidate> placements_by(const std::string& method, const JobSpec& o, const nn::Model& model,
                                           const plan::ClusterSpec& cluster, int ranks) {
  const plan::PlanRequest request{.build = [&](int64_t rows, int64_t) { return nn::build_model(o.model, rows, true); },
                                  .batch_inputs = batch_input_names(model),
                                  .batch = o.data.batch,
                                  .ranks = ranks,
                                  .cluster = &cluster};
  const plan::RooflineEstimator estimator(cluster);
  const plan::Deadline unbounded{};
  if (method == "layerwise") {
    plan::LayerSearch search{.request = &request, .estimator = &estimator, .model = &model};
    return plan::search_layers(search, unbounded);
  }
  plan::McmcSearch search{.request = &request, .estimator = &estimator, .model = &model, .proposals_per_mesh = 200};
  return plan::search_mcmc(search, unbounded);
}

// The searches on the GPT fixture over two nodes of two devices joined by a
// slow network (whole gradients reduced across nodes are dear, so a split
// pays): each returns a tensor-parallel placement of the imported GEMMs,
// and that plan, as a strategy file, trains as one rank does.
class OnnxPlannedTensorParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxPlannedTensorParallel, ThePlanMatchesOneRank) {
  plan::ClusterSpec cluster = plan::cluster_named("dgx-a100:2");
  cluster.devices_per_node = 2;
  cluster.inter_node.bandwidth = 12.5e6;  // 100 Mb/s
  JobSpec o = gpt_job();
  const nn::Model model = nn::build_model(o.model, o.data.batch, true);
  const std::vector<plan::Candidate> found = placements_by(GetParam(), o, model, cluster, 4);
  ASSERT_FALSE(found.empty()) << GetParam() << " placed nothing on the tensor axis";
  const parallel::Strategy& planned = found.front().strategy;
  int split = 0;
  for (const parallel::PlacementSeed& s : planned.seeds) split += s.axis == "tp";
  EXPECT_GT(split, 0) << found.front().description;

  testing::ScratchDir dir;
  const std::string path = dir.file("plan.json");
  std::ofstream(path) << parallel::to_json(planned).dump(2);
  const auto& single = testing::reference_losses("onnx gpt", o);
  o.strategy.strategy_file = path;
  o.strategy.mesh_ranks = 4;
  o.launch.ranks = 4;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                              GetParam() + ": " + found.front().description);
}

INSTANTIATE_TEST_SUITE_P(Searches, OnnxPlannedTensorParallel, ::testing::Values("layerwise", "mcmc"));

// The searches on the CNN fixture on devices whose compute is dear beside
// their links (1 GFLOP/s, 100 GB/s): splitting the convolutions pays, and
// each search's tensor-parallel placement splits them (conv1 by output
// channel, conv2 by input channel); that plan trains as one rank does.
class OnnxPlannedConvolutions : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxPlannedConvolutions, ThePlanSplitsTheConvolutionsAndMatchesOneRank) {
  plan::ClusterSpec cluster = plan::cluster_named("dgx-a100");
  cluster.device.flops_f32 = cluster.device.flops_bf16 = 1e9;
  cluster.intra_node = {.name = "link", .bandwidth = 1e11, .latency = 1e-6};
  JobSpec o = gpt_job();
  o.model.kind = fixture_path("cnn.onnx");
  o.data.path = testing::tiny_cnn().data.path;
  const nn::Model model = nn::build_model(o.model, o.data.batch, true);
  const std::vector<plan::Candidate> found = placements_by(GetParam(), o, model, cluster, 2);
  ASSERT_EQ(found.size(), 1u) << GetParam() << ": one placement of the one mesh dp=1 x tp=2";
  const parallel::Strategy& planned = found.front().strategy;
  std::map<std::string, std::string> split;
  for (const parallel::PlacementSeed& s : planned.seeds)
    if (s.axis == "tp") split[s.value] = s.placement.str();
  EXPECT_EQ(split["conv1.weight"], "S(0)") << found.front().description;
  EXPECT_EQ(split["conv1.bias"], "S(0)") << found.front().description;
  EXPECT_EQ(split["conv2.weight"], "S(1)") << found.front().description;
  EXPECT_EQ(split.count("conv2.bias"), 0u) << found.front().description;

  testing::ScratchDir dir;
  const std::string path = dir.file("plan.json");
  std::ofstream(path) << parallel::to_json(planned).dump(2);
  const auto& single = testing::reference_losses("onnx cnn", o);
  ASSERT_EQ(single.size(), static_cast<size_t>(kEquivalenceSteps));
  o.strategy.strategy_file = path;
  o.strategy.mesh_ranks = o.launch.ranks = 2;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                              GetParam() + ": " + found.front().description);
}

INSTANTIATE_TEST_SUITE_P(Searches, OnnxPlannedConvolutions, ::testing::Values("layerwise", "mcmc"));

// `parallax plan --model FILE.onnx --method X` for every X on the fixtures:
// each search returns a plan; alpa's, on a graph without blocks, are every
// layout's stages cut by cost and replayed on its Programs.
TEST(OnnxPlan, EveryMethodPlansTheFixtures) {
  const plan::ClusterSpec cluster = plan::cluster_named("dgx-a100");
  for (const char* file : {"mlp.onnx", "cnn.onnx", "gpt.onnx", "gpt_opset13.onnx"}) {
    JobSpec o = gpt_job();
    o.model.kind = fixture_path(file);
    const nn::Model model = nn::build_model(o.model, 8, true);
    plan::PlanRequest request{
        .build = [&](int64_t rows, int64_t) { return nn::build_model(o.model, rows, true); },
        .batch_inputs = batch_input_names(model),
        .batch = 8,
        .ranks = 4,
        .cluster = &cluster,
        .budget_seconds = 5};
    for (const char* method : {"auto", "grid", "layerwise", "mcmc", "alpa"}) {
      request.method = method;
      try {
        const plan::PlanResult result = plan::plan(request);
        EXPECT_FALSE(result.ranked.empty()) << file << " " << method;
        if (request.method == "alpa") {
          EXPECT_EQ(result.method, "alpa") << file;
          for (const plan::Candidate& c : result.ranked) EXPECT_TRUE(c.simulated) << file << " " << c.description;
        }
      } catch (const Error& e) {
        ADD_FAILURE() << file << " --method " << method << ": " << e.what();
      }
    }
  }
}

// The stage search on the GPT and the CNN fixtures (4 ranks of a DGX):
// its choice, and its fastest pipeline (stages cut by cost at node
// boundaries, named by their ONNX nodes), each a valid strategy that
// trains as one rank does.
class OnnxStagePlan : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxStagePlan, TheChoiceAndTheFastestPipelineMatchOneRank) {
  const plan::ClusterSpec cluster = plan::cluster_named("dgx-a100");
  JobSpec o = gpt_job();
  o.model.kind = fixture_path(GetParam() + ".onnx");
  if (GetParam() == "cnn") o.data.path = testing::tiny_cnn().data.path;
  const nn::Model model = nn::build_model(o.model, o.data.batch, true);
  const plan::PlanRequest request{
      .build = [&](int64_t rows, int64_t) { return nn::build_model(o.model, rows, true); },
      .batch_inputs = batch_input_names(model),
      .batch = o.data.batch,
      .ranks = 4,
      .cluster = &cluster,
      .budget_seconds = 20 * testing::time_scale(),  // the sanitizers' build searches 5-20x slower
      .method = "alpa"};
  const plan::PlanResult result = plan::plan(request);
  EXPECT_EQ(result.method, "alpa");
  EXPECT_FALSE(result.budget_exhausted) << "evaluated " << result.evaluated << " of " << result.considered;
  const plan::Candidate* pipeline = nullptr;
  for (const plan::Candidate& c : result.ranked)
    if (!pipeline && c.strategy.pipeline_ranks() > 1) pipeline = &c;
  ASSERT_NE(pipeline, nullptr) << GetParam() << ": no pipeline fits";
  // Its cuts named, so a run cuts where the plan was simulated (a bf16 run's own cut may move).
  EXPECT_EQ(pipeline->strategy.pipeline.stage_cuts.size(), static_cast<size_t>(pipeline->strategy.pipeline_ranks() - 1))
      << pipeline->description;
  const auto& single = testing::reference_losses("onnx " + GetParam() + " stage plan", o);
  ASSERT_EQ(single.size(), static_cast<size_t>(kEquivalenceSteps));
  testing::ScratchDir dir;
  std::vector<const plan::Candidate*> trained{&result.best()};
  if (pipeline != trained.front()) trained.push_back(pipeline);
  for (const plan::Candidate* c : trained) {
    const std::string path = dir.file("plan.json");
    std::ofstream(path) << parallel::to_json(c->strategy).dump(2);
    JobSpec planned = o;
    planned.strategy.strategy_file = path;
    planned.strategy.mesh_ranks = planned.launch.ranks = 4;  // the file's micro-batches and stages
    testing::expect_same_losses(single, testing::train_losses(planned), kEquivalenceTolerance,
                                GetParam() + " alpa: " + c->description);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OnnxStagePlan, ::testing::Values("gpt", "cnn"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace px
