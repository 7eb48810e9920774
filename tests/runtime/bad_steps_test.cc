// Bad steps (docs/fault_tolerance.md): a step whose loss or gradients are
// not finite changes nothing, runs once more, and its batch is then skipped
// for good; training goes on exactly as a run told to skip that batch, on
// one rank and across ranks of every kind of strategy, and a checkpoint
// remembers the batch.
#include <gtest/gtest.h>

#include <sstream>

#include "runtime/launch/launch.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::ScratchDir;

struct Case {
  const char* name;
  int ranks;
  void (*configure)(TrainOptions&);
};

class BadSteps : public ::testing::TestWithParam<Case> {};

TrainOptions job(const Case& c) {
  TrainOptions o = testing::tiny_gpt(testing::shared_text());
  o.gpt.dropout = 0;
  o.ranks = c.ranks;
  c.configure(o);
  return o;
}

TEST_P(BadSteps, AnInjectedNanIsSkippedAndTrainingMatchesARunWithoutThatBatch) {
  TrainOptions injected = job(GetParam());
  injected.inject_nan_steps = {3};
  std::ostringstream log;
  const TrainResult bad = train(injected, log);
  EXPECT_EQ(bad.skipped_runs, 2) << "the step runs twice before its batch is skipped for good";
  EXPECT_EQ(bad.bad_batches, std::vector<int64_t>{3});
  EXPECT_NE(log.str().find("batch 3 (data state"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("failed twice: skipped for good"), std::string::npos) << log.str();

  TrainOptions skipping = job(GetParam());
  skipping.skip_batches = {3};
  std::ostringstream quiet;
  const TrainResult reference = train(skipping, quiet);
  ASSERT_EQ(bad.losses.size(), 8u);
  ASSERT_EQ(reference.losses.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(bad.losses[i], reference.losses[i], 1e-5) << "step " << i + 1;
  EXPECT_NEAR(bad.evaluation.loss, reference.evaluation.loss, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, BadSteps,
    ::testing::Values(Case{"one_rank", 1, [](TrainOptions&) {}},
                      Case{"dp2", 2, [](TrainOptions&) {}},
                      Case{"dp2_zero2_two_micro_batches", 2,
                           [](TrainOptions& o) {
                             o.strategy.zero_stage = 2;
                             o.accumulation = 2;
                           }},
                      Case{"dp2_int8", 2,
                           [](TrainOptions& o) { o.strategy.compression = comm::compression::Spec::parse("int8"); }},
                      Case{"dp2_topk", 2,
                           [](TrainOptions& o) {
                             o.strategy.compression = comm::compression::Spec::parse("topk:0.1");
                             o.grad_clip = 0;
                           }},
                      Case{"tp2", 2, [](TrainOptions& o) { o.strategy.tensor_parallel = 2; }},
                      Case{"pp2", 2,
                           [](TrainOptions& o) {
                             o.strategy.pipeline_parallel = 2;
                             o.accumulation = 2;
                           }}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(BadStepsCheckpoint, AResumedRunStillSkipsTheBadBatch) {
  ScratchDir dir;
  TrainOptions o = testing::tiny_gpt(testing::shared_text());
  o.gpt.dropout = 0;
  std::ostringstream log;
  TrainOptions reference = o;
  reference.skip_batches = {3};
  const TrainResult whole = train(reference, log);

  TrainOptions head = o;
  head.inject_nan_steps = {3};
  head.save = dir.file("ckpt");
  head.stop_after = 4;
  ASSERT_EQ(train(head, log).bad_batches, std::vector<int64_t>{3});
  TrainOptions tail = o;
  tail.resume = dir.file("ckpt");
  const TrainResult rest = train(tail, log);
  EXPECT_EQ(rest.bad_batches, std::vector<int64_t>{3}) << "the checkpoint remembers the batch";
  ASSERT_EQ(rest.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(rest.losses[i], whole.losses[i + 4]) << "step " << i + 5;
}

TEST(BadStepsOptions, AreCheckedAndNamed) {
  TrainOptions o = testing::tiny_gpt(testing::shared_text());
  o.skip_batches = {0};
  EXPECT_THROW(
      {
        try {
          validate(o);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("--skip-batches 0"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace px
