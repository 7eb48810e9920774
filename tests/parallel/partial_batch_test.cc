// An epoch's partial last batch trains under every strategy, and
// evaluation does not depend on the strategy.
//
// The MLP on 100 Fashion-MNIST images in batches of 7: each epoch is 14
// full batches and one of 2 rows, fewer rows than some strategies have
// data-parallel ranks (a rank without rows computes nothing and still runs
// every collective). Two epochs under each strategy give one rank's
// per-step losses: the partial batch's loss is the mean over its 2 rows.
#include <gtest/gtest.h>

#include <sstream>

#include "parallel/pipeline_schedule.h"
#include "parallel/strategy_equivalence.h"
#include "runtime/launch/launch.h"
#include "testing/fashion_subset.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::kEquivalenceTolerance;

constexpr int64_t kTrainImages = 100, kBatch = 7;
constexpr int64_t kBatchesPerEpoch = 15;  // 14 of 7 rows, one of 2

const std::string& subset_dir() {
  static testing::ScratchDir dir;
  static const std::string path = testing::write_fashion_subset(dir, kTrainImages, 50);
  return path;
}

JobSpec two_epochs(const std::string& model) {
  JobSpec o = model == "cnn" ? testing::tiny_cnn() : testing::tiny_mlp();
  o.data.path = subset_dir();
  o.data.batch = kBatch;
  o.run.steps = 0;
  o.run.epochs = 2;
  return o;
}

struct PartialCase {
  std::string name;
  std::string model;
  int ranks = 1;
  int zero = 0;
  int micro_batches = 1;
  int pipeline = 1;
};

class PartialBatch : public ::testing::TestWithParam<PartialCase> {};

TEST_P(PartialBatch, TwoEpochsMatchOneRank) {
  const PartialCase& c = GetParam();
  const JobSpec one = two_epochs(c.model);
  const std::vector<double>& single = testing::reference_losses(c.model + "-partial", one);
  ASSERT_EQ(single.size(), static_cast<size_t>(2 * kBatchesPerEpoch));
  JobSpec o = one;
  o.launch.ranks = c.ranks;
  o.strategy.zero_stage = c.zero;
  o.strategy.micro_batches = c.micro_batches;
  o.strategy.pipeline_parallel = c.pipeline;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance, c.name);
}

// The partial batch's loss is a mean over its 2 rows, not a sum scaled for
// 7 (which would be 2/7 of a row's loss): it lies near its neighbours'.
TEST(PartialBatchLoss, IsTheMeanOverTheRowsThereAre) {
  const std::vector<double>& losses = testing::reference_losses("mlp-partial", two_epochs("mlp"));
  ASSERT_EQ(losses.size(), static_cast<size_t>(2 * kBatchesPerEpoch));
  const double partial = losses[kBatchesPerEpoch - 1];
  const double neighbours = (losses[kBatchesPerEpoch - 3] + losses[kBatchesPerEpoch - 2] + losses[kBatchesPerEpoch]) / 3;
  EXPECT_GT(partial, 0.5 * neighbours);
  EXPECT_LT(partial, 2.0 * neighbours);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, PartialBatch,
    ::testing::Values(PartialCase{.name = "MlpThreeRanks", .model = "mlp", .ranks = 3},
                      PartialCase{.name = "MlpZero2TwoRanks", .model = "mlp", .ranks = 2, .zero = 2},
                      PartialCase{.name = "MlpTwoRanksThreeMicroBatches", .model = "mlp", .ranks = 2,
                                  .micro_batches = 3},
                      PartialCase{.name = "MlpTwoStagesThreeMicroBatches", .model = "mlp", .ranks = 2,
                                  .micro_batches = 3, .pipeline = 2},
                      PartialCase{.name = "MlpTwoStagesTimesTwoRanks", .model = "mlp", .ranks = 4, .zero = 1,
                                  .micro_batches = 2, .pipeline = 2},
                      PartialCase{.name = "CnnThreeRanksZero3", .model = "cnn", .ranks = 3, .zero = 3}),
    [](const auto& info) { return info.param.name; });

// The partial batch is a step of its own: the first batch of the second
// epoch is a fresh permutation's, and the loss of the 2-row batch is not
// the 7-row batches' (a run that dropped it would differ from step 15 on).
TEST(PartialBatchCount, AnEpochIsCeilOfImagesOverBatchAndDropLastLeavesThePartialOut) {
  JobSpec o = two_epochs("mlp");
  o.optimizer.schedule.kind = "constant";  // the same rates whatever the step count
  std::ostringstream log;
  const JobResult kept = train(o, log);
  EXPECT_EQ(kept.run.losses.size(), static_cast<size_t>(2 * kBatchesPerEpoch)) << log.str();
  o.data.drop_last = true;
  const JobResult dropped = train(o, log);
  ASSERT_EQ(dropped.run.losses.size(), static_cast<size_t>(2 * (kBatchesPerEpoch - 1))) << log.str();
  // The first epoch's full batches are the same batches on the same weights.
  for (int64_t s = 0; s < kBatchesPerEpoch - 1; ++s)
    EXPECT_EQ(dropped.run.losses[static_cast<size_t>(s)], kept.run.losses[static_cast<size_t>(s)]) << "step " << s + 1;
  EXPECT_NE(dropped.run.losses[kBatchesPerEpoch - 1], kept.run.losses[kBatchesPerEpoch - 1]);
}

// The same weights give the same validation loss under every strategy: a
// learning rate too small to change an fp32 weight keeps the initial ones,
// and validation runs the global batch's windows whatever the ranks,
// micro-batches or stages.
TEST(Validation, SameWeightsGiveTheSameLossUnderEveryStrategy) {
  JobSpec one = testing::tiny_gpt(testing::shared_text());
  one.data.batch = 8;
  one.run.steps = 2;
  one.optimizer.schedule = {.kind = "constant", .lr = 1e-30, .warmup = 0, .total = 2, .min_ratio = 0};
  one.optimizer.update.weight_decay = 0;
  one.run.sample_tokens = 0;
  std::ostringstream log;
  const double reference = train(one, log).run.evaluation.loss;
  struct Variant {
    const char* name;
    int ranks, micro_batches, tp, pp;
  };
  for (const Variant& v : {Variant{"2 micro-batches", 1, 2, 1, 1}, Variant{"dp=2", 2, 1, 1, 1},
                           Variant{"tp=2", 2, 1, 2, 1}, Variant{"pp=2, 4 micro-batches", 2, 4, 1, 2}}) {
    JobSpec o = one;
    o.launch.ranks = v.ranks;
    o.strategy.micro_batches = v.micro_batches;
    o.strategy.tensor_parallel = v.tp;
    o.strategy.pipeline_parallel = v.pp;
    const double loss = train(o, log).run.evaluation.loss;
    EXPECT_NEAR(loss, reference, 1e-6 * reference) << v.name;
  }
}

}  // namespace
}  // namespace px
