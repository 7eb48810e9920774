// Strategy composition (parallel/compose.h): a request, its strategy file
// and the planner's grid point compose the same Strategy; the run's P3 and
// SGD momentum change the lowering options there; and every combination
// rule of validate() is a named error, whichever way the strategy came.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/compression/spec.h"
#include "graph/precision.h"
#include "nn/gpt.h"
#include "parallel/compose.h"
#include "plan/candidates.h"
#include "runtime/tasks/task.h"
#include "testing/scratch_dir.h"

namespace px::parallel {
namespace {

// A 2-layer GPT: (B=4, T=8), vocabulary 64, C=16, two heads.
nn::Model small_gpt() {
  const nn::GptConfig config{.vocab = 64, .block = 8, .n_layer = 2, .n_head = 2, .n_embd = 16, .dropout = 0.1};
  return nn::build_gpt(config, 4, config.block, true);
}

std::string error_of(const auto& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Compose, RequestFileAndGridPointMakeTheSameStrategy) {
  const nn::Model model = small_gpt();
  const StrategyRequest request{.zero_stage = 1,
                                .tensor_parallel = 2,
                                .sequence_parallel = true,
                                .pipeline_parallel = 2,
                                .pipeline = {.schedule = PipelineKind::gpipe},
                                .recompute = Recompute::selective,
                                .micro_batches = 2};
  const CompositionInputs inputs{.graph = &model.graph, .batch_inputs = batch_input_names(model), .ranks = 8};
  const Strategy composed = compose(request, inputs);
  EXPECT_EQ(composed.mesh.str(), "{pp:2, dp:2, tp:2}");
  EXPECT_EQ(strategy_from_json(to_json(composed)), composed);
  const std::optional<Strategy> point =
      plan::grid_strategy(model.graph, {.ranks = 8, .batch = 4, .batch_inputs = inputs.batch_inputs},
                          {.pp = 2, .tp = 2, .sp = true, .micro_batches = 2, .kind = PipelineKind::gpipe, .zero = 1,
                           .recompute = Recompute::selective});
  ASSERT_TRUE(point.has_value());
  EXPECT_EQ(*point, composed);
}

TEST(Compose, P3LowersWithoutAGlobalNormAndWithABucketPerTensor) {
  const nn::Model model = small_gpt();
  const Strategy s = compose({.p3_slice_bytes = 4096},
                             {.graph = &model.graph, .batch_inputs = batch_input_names(model), .ranks = 2});
  EXPECT_FALSE(s.lowering.global_norm);
  EXPECT_EQ(s.lowering.bucket_bytes, 0);
  EXPECT_EQ(s.lowering.p3_slice_bytes, 4096);
  EXPECT_EQ(strategy_from_json(to_json(s)), s);
  EXPECT_TRUE(compose({}, {.graph = &model.graph, .batch_inputs = batch_input_names(model), .ranks = 2})
                  .lowering.global_norm);
}

TEST(Compose, SparsifiedGradientsTakeSgdMomentumIntoTheRanks) {
  const nn::Model model = small_gpt();
  const CompositionInputs inputs{
      .graph = &model.graph, .batch_inputs = batch_input_names(model), .ranks = 2, .sgd_momentum = 0.9};
  EXPECT_EQ(compose({.compression = comm::compression::Spec::parse("topk:0.1")}, inputs).lowering.local_momentum, 0.9);
  EXPECT_EQ(compose({.compression = comm::compression::Spec::parse("int8")}, inputs).lowering.local_momentum, 0);
  CompositionInputs one = inputs;
  one.ranks = 1;  // nothing is compressed on one rank
  EXPECT_EQ(compose({.compression = comm::compression::Spec::parse("topk:0.1")}, one).lowering.local_momentum, 0);
}

// The strategy carries the request's precision (a file `parallax plan`
// writes runs in the precision it was planned for); a file that records
// none runs at the request's.
TEST(Compose, TheStrategyCarriesThePrecisionThroughItsFile) {
  const nn::Model model = small_gpt();
  const CompositionInputs inputs{.graph = &model.graph, .batch_inputs = batch_input_names(model), .ranks = 2};
  EXPECT_EQ(compose({}, inputs).precision, Precision::fp32);
  const Strategy bf16 = compose({.zero_stage = 1, .precision = Precision::bf16}, inputs);
  EXPECT_EQ(bf16.precision, Precision::bf16);
  const nlohmann::json json = to_json(bf16);
  EXPECT_EQ(json.at("precision"), "bf16");
  EXPECT_EQ(strategy_from_json(json), bf16);
  nlohmann::json unrecorded = json;
  unrecorded.erase("precision");
  EXPECT_EQ(strategy_from_json(unrecorded).precision, Precision::fp32);
  testing::ScratchDir dir;
  const std::string file = dir.file("unrecorded.json");
  std::ofstream(file) << unrecorded.dump();
  bool records = true;
  load_strategy(file, &records);
  EXPECT_FALSE(records);
  EXPECT_EQ(compose({.precision = Precision::bf16, .strategy_file = file}, inputs).precision, Precision::bf16)
      << "a file that records no precision runs at the request's";
  nlohmann::json bad = json;
  bad["precision"] = "fp16";
  EXPECT_NE(error_of([&] { strategy_from_json(bad); }).find("precision 'fp16' is unknown"), std::string::npos)
      << error_of([&] { strategy_from_json(bad); });
}

// --cp puts a context axis after the data axis, its seeds and its method,
// and a strategy file keeps them; an unknown method is named.
TEST(Compose, ContextParallelismRoundTripsThroughItsFile) {
  const nn::Model model = small_gpt();
  const Strategy s = compose({.context_parallel = 2},
                             {.graph = &model.graph, .batch_inputs = batch_input_names(model), .ranks = 4});
  EXPECT_EQ(s.mesh.str(), "{dp:2, cp:2}");
  EXPECT_EQ(s.context_ranks(), 2);
  EXPECT_EQ(s.context.method, ContextMethod::ring);
  EXPECT_EQ(strategy_from_json(to_json(s)), s);
  nlohmann::json bad = to_json(s);
  bad["context"]["method"] = "ring-of-fire";
  EXPECT_NE(error_of([&] { strategy_from_json(bad); }).find("method 'ring-of-fire' is not one of"), std::string::npos)
      << error_of([&] { strategy_from_json(bad); });
}

TEST(Compose, EveryCombinationRuleIsANamedError) {
  const nn::Model model = small_gpt();
  const CompositionInputs two{.graph = &model.graph, .batch_inputs = batch_input_names(model), .ranks = 2};
  const CompositionInputs four{.graph = &model.graph, .batch_inputs = batch_input_names(model), .ranks = 4};
  const comm::compression::Spec topk = comm::compression::Spec::parse("topk:0.1");
  struct Case {
    StrategyRequest request;
    CompositionInputs inputs;
    std::string expected;
  };
  CompositionInputs clipped = two;
  clipped.grad_clip = 1;
  const Case cases[] = {
      {{.zero_stage = 1, .compression = topk}, two, "ZeRO-1 and gradient compression (topk:0.1) do not combine"},
      {{.compression = topk, .tensor_parallel = 2}, four,
       "gradient compression (topk:0.1) and tensor parallelism (axis 'tp' of 2 ranks) do not combine"},
      {{.compression = topk, .pipeline_parallel = 2}, four, "does not combine with pipeline stages"},
      {{.zero_stage = 3, .pipeline_parallel = 2}, four, "ZeRO-3 does not combine with pipeline stages"},
      {{.p3_slice_bytes = 1024}, clipped, "--grad-clip 1 needs every gradient first"},
      {{.zero_stage = 2, .p3_slice_bytes = 1024}, two, "ZeRO-2 and P3 do not combine"},
      {{.compression = topk, .p3_slice_bytes = 1024}, two, "P3 and gradient compression (topk:0.1) do not combine"},
      {{.p3_slice_bytes = 1024, .pipeline_parallel = 2}, four, "P3 and pipeline stages ('pp' of 2 ranks)"},
      {{.p3_slice_bytes = 1024, .tensor_parallel = 2}, four, "P3 and tensor parallelism (axis 'tp' of 2 ranks)"},
      {{.pipeline_parallel = 1, .pipeline = {.virtual_stages = 2}}, two, "2 virtual stages need a pipeline axis"},
      {{.pipeline = {.stage_cuts = {"h.1"}}}, two, "stage cuts (h.1) need a pipeline axis 'pp'"},
      {{.tensor_parallel = 3}, four, "--pp 1 x --tp 3 does not divide the job's 4 ranks"},
      {{.context_parallel = 3}, four, "--pp 1 x --cp 3 x --tp 1 does not divide the job's 4 ranks"},
      {{.compression = topk, .context_parallel = 2}, two,
       "gradient compression (topk:0.1) and context parallelism (axis 'cp' of 2 ranks) do not combine"},
      {{.p3_slice_bytes = 1024, .context_parallel = 2}, two, "P3 and context parallelism (axis 'cp' of 2 ranks)"},
      {{.tensor_parallel = 2, .context_parallel = 2, .context_method = ContextMethod::all_to_all}, four,
       "context parallelism by all-to-all (axis 'cp') and tensor parallelism (axis 'tp' of 2 ranks)"},
      {{.mesh_ranks = 8}, four, "--mesh names 8 ranks; this job has 4"},
  };
  for (const Case& c : cases) {
    const std::string what = error_of([&] { compose(c.request, c.inputs); });
    EXPECT_NE(what.find(c.expected), std::string::npos) << "expected '" << c.expected << "', got: " << what;
  }
}

TEST(Compose, AStrategyThatComputesAGlobalNormIsRefusedUnderP3) {
  const nn::Model model = small_gpt();
  const Strategy file = compose({}, {.graph = &model.graph, .batch_inputs = batch_input_names(model), .ranks = 2});
  Strategy deferred = file;
  deferred.lowering.p3_slice_bytes = 1024;
  const std::string what = error_of([&] { validate(deferred); });
  EXPECT_NE(what.find("the program computes a global gradient norm first"), std::string::npos) << what;
  deferred.lowering.global_norm = false;
  EXPECT_NO_THROW(validate(deferred));
}

}  // namespace
}  // namespace px::parallel
