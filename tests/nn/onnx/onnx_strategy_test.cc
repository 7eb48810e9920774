// Imported ONNX models under parallel strategies against one rank, each
// fixture at dp=2, ZeRO-3 at 3 ranks and 2 pipeline stages: the MLP
// (loss attached by parallax) and the CNN (loss in the graph) from
// tests/fixtures/onnx, trained 50 AdamW steps on Fashion-MNIST through the
// whole trainer, and the GPT-style one on a generated text, give one rank's per-step losses at 2 and 3 in-process
// ranks, with ZeRO-1 at 2 and ZeRO-3 at 3, in 2 pipeline stages of 4
// micro-batches (cut by cost at a node boundary), and the GPT-style one in
// Megatron's tensor parallelism at tp=2 from a strategy file whose seeds
// name its ONNX parameters (gpt_megatron_tp2.json: c_attn and c_fc split
// by output rows, c_proj and mlp_proj by input columns; torch's (out, in)
// layout). The autoencoder (its mse attached by parallax, against the
// images) likewise, and at tp=2 with its first layer split by output rows
// (autoencoder_tp2.json), so the divisions, the constant blocks and the
// means run on split values. The regression (its RMS norm, repeated
// constant row, labels cast to float and mean-squared loss in the graph)
// likewise, at tp=2 with its first layer split by output rows
// (regression_tp2.json), so its norm's factors multiply split rows. The
// CNN at dp=2 x tp=2 with its convolutions split (cnn_conv_tp2.json: conv1
// by output channel, conv2 by input channel, its bias whole), so the relu
// and the pool run on channel shards and conv2's partial sums are reduced.
// gpt_dynamic (exported with dynamic_axes on the batch and the sequence:
// its positions and causal mask are shape arithmetic folded at import for
// the bound length) at 2 ranks, ZeRO-3 at 3 and 2 pipeline stages.
#include <gtest/gtest.h>

#include "parallel/strategy_equivalence.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::kEquivalenceSteps;
using testing::kEquivalenceTolerance;

JobSpec onnx_job(const std::string& fixture) {
  JobSpec o = testing::tiny_cnn();
  o.model.kind = std::string(PX_ONNX_FIXTURES) + "/" + fixture + ".onnx";
  if (fixture.starts_with("gpt")) o.data.path = testing::shared_text();  // byte windows as long as its input (8)
  if (fixture == "autoencoder") o.model.onnx.loss = "mse";  // against the images: no loss in its graph
  o.run.steps = kEquivalenceSteps;
  o.optimizer.schedule = {.kind = "cosine", .lr = 1e-3, .warmup = 0, .total = kEquivalenceSteps, .min_ratio = 0.0};
  o.optimizer.update = {.kind = "adamw", .weight_decay = 0.01};
  return o;
}

struct OnnxCase {
  std::string fixture;
  int ranks = 2;
  int zero = 0;
  int stages = 1;  // pipeline stages, each running 4 micro-batches when > 1
  std::string strategy;  // a strategy file in the fixtures (its mesh names the ranks)
};

class OnnxStrategies : public ::testing::TestWithParam<OnnxCase> {};

TEST_P(OnnxStrategies, MatchesOneRank) {
  const OnnxCase c = GetParam();
  JobSpec o = onnx_job(c.fixture);
  const auto& single = testing::reference_losses("onnx " + c.fixture, o);
  // The reference trained every step, and trained: equal empty or flat runs prove nothing.
  ASSERT_EQ(single.size(), static_cast<size_t>(kEquivalenceSteps)) << c.fixture;
  EXPECT_NE(single.front(), single.back()) << c.fixture << ": the single rank's loss never moved";
  o.launch.ranks = c.ranks;
  o.strategy.zero_stage = c.zero;
  o.strategy.pipeline_parallel = c.stages;
  if (c.stages > 1) o.strategy.micro_batches = 4;
  if (!c.strategy.empty()) {
    o.strategy.strategy_file = std::string(PX_ONNX_FIXTURES) + "/" + c.strategy;
    o.strategy.mesh_ranks = c.ranks;
  }
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                              fmt::format("{}.onnx at {} ranks, ZeRO-{}, {} stages", c.fixture, c.ranks, c.zero, c.stages));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OnnxStrategies,
                         ::testing::Values(OnnxCase{"mlp", 2}, OnnxCase{"cnn", 2}, OnnxCase{"cnn", 3},
                                           OnnxCase{"mlp", 2, 1}, OnnxCase{"mlp", 3, 3}, OnnxCase{"mlp", 2, 0, 2},
                                           OnnxCase{"cnn", 3, 3}, OnnxCase{"cnn", 2, 0, 2}, OnnxCase{"gpt", 2},
                                           OnnxCase{"gpt", 3, 1}, OnnxCase{"gpt", 3, 3}, OnnxCase{"gpt", 2, 0, 2},
                                           OnnxCase{"gpt_opset13", 2}, OnnxCase{"gpt_opset13", 3, 3},
                                           OnnxCase{"gpt_opset13", 2, 0, 2}, OnnxCase{"mlp_ops", 2},
                                           OnnxCase{"mlp_ops", 3, 3}, OnnxCase{"mlp_ops", 2, 0, 2},
                                           OnnxCase{"gpt", 2, 0, 1, "gpt_megatron_tp2.json"},
                                           OnnxCase{"autoencoder", 2}, OnnxCase{"autoencoder", 3, 3},
                                           OnnxCase{"autoencoder", 2, 0, 2},
                                           OnnxCase{"autoencoder", 2, 0, 1, "autoencoder_tp2.json"},
                                           OnnxCase{"regression", 2}, OnnxCase{"regression", 3, 3},
                                           OnnxCase{"regression", 2, 0, 2},
                                           OnnxCase{"regression", 2, 0, 1, "regression_tp2.json"},
                                           OnnxCase{"cnn", 4, 0, 1, "cnn_conv_tp2.json"},
                                           OnnxCase{"gpt_dynamic", 2}, OnnxCase{"gpt_dynamic", 3, 3},
                                           OnnxCase{"gpt_dynamic", 2, 0, 2}),
                         [](const auto& info) {
                           return fmt::format("{}_{}ranks_zero{}_{}stages{}", info.param.fixture, info.param.ranks,
                                              info.param.zero, info.param.stages,
                                              info.param.strategy.empty() ? "" : "_tp_file");
                         });

}  // namespace
}  // namespace px
