// bf16 mixed precision under every strategy family, each against one rank
// in bf16 (strategy_equivalence.h), 50 steps of a 4-head GPT.
//
// The tolerances. Data parallelism keeps every GEMM's shape and summation
// order against one rank accumulating each rank's rows as a micro-batch:
// the same arithmetic, fp32's 1e-5. Where a strategy does not (tensor
// parallelism splits the GEMMs and sums partial products in the allreduce;
// ZeRO-3's reduce-scatter adds the ranks' weight gradients), the weights
// differ in their last fp32 bits after one step, and rounding to bf16 is a
// step function: a last-bit change moves some GEMM inputs of the next step
// by a whole bf16 unit (2^-8 relative). The runs then drift like two bf16
// runs of the same rounding noise: 1e-3 relative, the bound the issue sets,
// far below what a strategy that dropped or doubled a contribution would
// show (the loss falls by more than 10% over the run).
//
// A pipeline keeps every GEMM's shape, and the global gradient norm that
// clipping divides by is summed in one order everywhere (each parameter's
// squares in an entry of its own, added in parameter order: parallel/
// program.h's Norm), so an MLP cut in two, and the GPT with one
// micro-batch, equal one rank exactly, clipping on. The GPT with several
// micro-batches is held to the 1e-3 bound, and the reason is one sum that
// no order can make agree with both exact cases. GPT ties wte to the LM
// head: its gradient has an embedding part e and a head part h per
// micro-batch. Data parallelism on r ranks reduces each rank's e_i + h_i
// with the one allreduce it already does: (e0+h0)+(e1+h1), which one rank
// accumulating r micro-batches matches (the exact dp test below). The two
// pipeline stages make e and h on different ranks: the first accumulates
// e0+e1+.., the last h0+h1+.., and one wte-sized allreduce adds them at the
// step's end: (e0+e1+..)+(h0+h1+..). For the pipeline to add in dp's order
// the stages would exchange a wte-sized gradient every micro-batch (for
// gpt-small 154 MB each); for one rank to add in the pipeline's, it would
// keep a second wte-sized accumulator, and dp would then have to reduce e
// and h apart (a second wte-sized allreduce every step) to stay exact. The
// orders differ in the last fp32 bit of wte's gradient (fp32 pp=2 stays
// within 1e-6 of one rank over the run, the test
// PipelineOfSeveralMicroBatchesDiffersOnlyInTheTiedSumsOrder), which
// bf16's rounding of the next step's GEMM inputs amplifies to about 7e-5.
#include <gtest/gtest.h>

#include <string>

#include "kernels/cpu_features.h"
#include "strategy_equivalence.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::kEquivalenceSteps;

constexpr double kReshapedTolerance = 1e-3;

JobSpec bf16_gpt(int accumulation) {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt.n_head = 4;
  o.model.gpt.n_embd = 32;
  o.model.gpt.n_layer = 2;
  o.run.steps = o.optimizer.schedule.total = kEquivalenceSteps;
  o.data.batch = 8;
  o.strategy.micro_batches = accumulation;
  o.run.eval_every = 0;
  o.strategy.precision = Precision::bf16;
  return o;
}

// One rank's bf16 losses, checked to be what the tolerances assume: a run
// that learns (by more than 10%, far beyond 1e-3) and that ran in bf16 (its
// losses differ from fp32's, else every comparison here would be fp32's).
const std::vector<double>& one_rank(int accumulation) {
  const std::vector<double>& bf16 =
      testing::reference_losses("bf16 gpt accumulating " + std::to_string(accumulation), bf16_gpt(accumulation));
  EXPECT_EQ(bf16.size(), static_cast<size_t>(kEquivalenceSteps));
  if (!bf16.empty()) EXPECT_LT(bf16.back(), 0.9 * bf16.front()) << "the bf16 reference did not learn";
  JobSpec fp32 = bf16_gpt(accumulation);
  fp32.strategy.precision = Precision::fp32;
  EXPECT_NE(testing::reference_losses("fp32 gpt accumulating " + std::to_string(accumulation), fp32), bf16)
      << "bf16 losses equal fp32's bitwise: the bf16 path did not run";
  return bf16;
}

class MixedPrecisionStrategies : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16: --precision bf16 is refused";
  }
};

TEST_F(MixedPrecisionStrategies, DataParallelEqualsOneRankAccumulatingItsRows) {
  JobSpec o = bf16_gpt(1);
  o.launch.ranks = 2;
  testing::expect_same_losses(one_rank(2), testing::train_losses(o), testing::kEquivalenceTolerance,
                              "bf16 at dp=2");
}

TEST_F(MixedPrecisionStrategies, PipelineFollowsOneRankAccumulatingItsMicroBatches) {
  JobSpec o = bf16_gpt(4);
  o.launch.ranks = 2;
  o.strategy.pipeline_parallel = 2;
  testing::expect_same_losses(one_rank(4), testing::train_losses(o), kReshapedTolerance,
                              "bf16 at pp=2 with 4 micro-batches");
}

// The same job in fp32: only the tied wte's sums are ordered differently
// (see the top), a last-bit difference that stays below 1e-6 over the run
// where fp32 has no rounding of GEMM inputs to amplify it. A dropped or
// doubled term would move the losses by orders of magnitude more.
TEST_F(MixedPrecisionStrategies, PipelineOfSeveralMicroBatchesDiffersOnlyInTheTiedSumsOrder) {
  JobSpec single = bf16_gpt(4);
  single.strategy.precision = Precision::fp32;
  JobSpec o = single;
  o.launch.ranks = 2;
  o.strategy.pipeline_parallel = 2;
  testing::expect_same_losses(testing::reference_losses("fp32 gpt accumulating 4", single), testing::train_losses(o),
                              1e-6, "fp32 at pp=2 with 4 micro-batches");
}

// With one micro-batch the tied wte's two gradient parts are added in the
// same order on one rank and across the stages, and the clipped norm is
// summed per parameter in parameter order on both: the losses are equal.
// The clip is active (the same run unclipped learns differently).
TEST_F(MixedPrecisionStrategies, PipelineOfOneMicroBatchEqualsOneRankWithClipping) {
  JobSpec single = bf16_gpt(1);
  single.optimizer.grad_clip = 0.25;
  JobSpec o = single;
  o.launch.ranks = 2;
  o.strategy.pipeline_parallel = 2;
  const std::vector<double>& reference = testing::reference_losses("bf16 gpt clipped at 0.25", single);
  testing::expect_same_losses(reference, testing::train_losses(o), testing::kEquivalenceTolerance,
                              "bf16 at pp=2 with 1 micro-batch, clipped");
  JobSpec unclipped = single;
  unclipped.optimizer.grad_clip = 0;
  EXPECT_NE(testing::reference_losses("bf16 gpt without clipping", unclipped), reference)
      << "the clip never scaled a gradient: the test would not see the norm's order";
}

// The MLP cut before fc2 sends relu's output in bf16 (fc2 and its weight
// gradient, the only readers past the cut, round it anyway) and has no
// parameter two stages share: the same arithmetic as one rank, exactly,
// over several micro-batches and with an active clip.
TEST_F(MixedPrecisionStrategies, PipelineSendingBf16EqualsOneRankAccumulatingItsMicroBatches) {
  JobSpec single = testing::tiny_mlp();
  single.strategy.precision = Precision::bf16;
  single.strategy.micro_batches = 4;
  single.optimizer.grad_clip = 0.05;
  single.run.steps = single.optimizer.schedule.total = 20;
  single.run.eval_every = 0;
  JobSpec o = single;
  o.launch.ranks = 2;
  o.strategy.pipeline_parallel = 2;
  o.strategy.pipeline.stage_cuts = {"fc2"};
  const std::vector<double> reference = testing::train_losses(single);
  testing::expect_same_losses(reference, testing::train_losses(o), testing::kEquivalenceTolerance,
                              "bf16 MLP at pp=2, relu's output sent in bf16, clipped");
  JobSpec unclipped = single;
  unclipped.optimizer.grad_clip = 0;
  EXPECT_NE(testing::train_losses(unclipped), reference) << "the clip never scaled a gradient";
}

TEST_F(MixedPrecisionStrategies, Zero3FollowsOneRank) {
  JobSpec o = bf16_gpt(1);
  o.launch.ranks = 3;
  o.data.batch = 9;
  o.strategy.zero_stage = 3;
  JobSpec single = bf16_gpt(1);
  single.data.batch = 9;
  testing::expect_same_losses(testing::reference_losses("bf16 gpt batch 9", single), testing::train_losses(o),
                              kReshapedTolerance, "bf16 at ZeRO-3 on 3 ranks");
}

TEST_F(MixedPrecisionStrategies, TensorAndSequenceParallelFollowOneRank) {
  for (bool sequence_parallel : {false, true}) {
    JobSpec o = bf16_gpt(1);
    o.launch.ranks = 2;
    o.strategy.tensor_parallel = 2;
    o.strategy.sequence_parallel = sequence_parallel;
    testing::expect_same_losses(one_rank(1), testing::train_losses(o), kReshapedTolerance,
                                sequence_parallel ? "bf16 at tp=2 with sequence parallelism" : "bf16 at tp=2");
  }
}

TEST_F(MixedPrecisionStrategies, RecomputeEqualsOneRankWithout) {
  for (parallel::Recompute recompute : {parallel::Recompute::full, parallel::Recompute::selective}) {
    JobSpec o = bf16_gpt(1);
    o.strategy.recompute = recompute;
    testing::expect_same_losses(one_rank(1), testing::train_losses(o), testing::kEquivalenceTolerance,
                                fmt::format("bf16 with {} recomputation", parallel::recompute_name(recompute)));
  }
}

}  // namespace
}  // namespace px
