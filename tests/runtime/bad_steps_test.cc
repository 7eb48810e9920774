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
  void (*configure)(JobSpec&);
};

class BadSteps : public ::testing::TestWithParam<Case> {};

JobSpec job(const Case& c) {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt.dropout = 0;
  o.launch.ranks = c.ranks;
  c.configure(o);
  return o;
}

TEST_P(BadSteps, AnInjectedNanIsSkippedAndTrainingMatchesARunWithoutThatBatch) {
  JobSpec injected = job(GetParam());
  injected.fault.inject_nan_steps = {3};
  std::ostringstream log;
  const JobResult bad = train(injected, log);
  EXPECT_EQ(bad.data_parallel->skipped_runs, 2) << "the step runs twice before its batch is skipped for good";
  EXPECT_EQ(bad.data_parallel->bad_batches, std::vector<int64_t>{3});
  EXPECT_NE(log.str().find("batch 3 (data state"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("failed twice: skipped for good"), std::string::npos) << log.str();

  JobSpec skipping = job(GetParam());
  skipping.fault.skip_batches = {3};
  std::ostringstream quiet;
  const JobResult reference = train(skipping, quiet);
  ASSERT_EQ(bad.run.losses.size(), 8u);
  ASSERT_EQ(reference.run.losses.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(bad.run.losses[i], reference.run.losses[i], 1e-5) << "step " << i + 1;
  EXPECT_NEAR(bad.run.evaluation.loss, reference.run.evaluation.loss, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, BadSteps,
    ::testing::Values(Case{"one_rank", 1, [](JobSpec&) {}},
                      Case{"dp2", 2, [](JobSpec&) {}},
                      Case{"dp2_zero2_two_micro_batches", 2,
                           [](JobSpec& o) {
                             o.strategy.zero_stage = 2;
                             o.strategy.micro_batches = 2;
                           }},
                      Case{"dp2_int8", 2,
                           [](JobSpec& o) { o.strategy.compression = comm::compression::Spec::parse("int8"); }},
                      Case{"dp2_topk", 2,
                           [](JobSpec& o) {
                             o.strategy.compression = comm::compression::Spec::parse("topk:0.1");
                             o.optimizer.grad_clip = 0;
                           }},
                      Case{"tp2", 2, [](JobSpec& o) { o.strategy.tensor_parallel = 2; }},
                      Case{"pp2", 2,
                           [](JobSpec& o) {
                             o.strategy.pipeline_parallel = 2;
                             o.strategy.micro_batches = 2;
                           }}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(BadStepsCheckpoint, AResumedRunStillSkipsTheBadBatch) {
  ScratchDir dir;
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt.dropout = 0;
  std::ostringstream log;
  JobSpec reference = o;
  reference.fault.skip_batches = {3};
  const JobResult whole = train(reference, log);

  JobSpec head = o;
  head.fault.inject_nan_steps = {3};
  head.checkpoint.save = dir.file("ckpt");
  head.run.stop_after = 4;
  ASSERT_EQ(train(head, log).data_parallel->bad_batches, std::vector<int64_t>{3});
  JobSpec tail = o;
  tail.checkpoint.resume = dir.file("ckpt");
  const JobResult rest = train(tail, log);
  EXPECT_EQ(rest.data_parallel->bad_batches, std::vector<int64_t>{3}) << "the checkpoint remembers the batch";
  ASSERT_EQ(rest.run.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(rest.run.losses[i], whole.run.losses[i + 4]) << "step " << i + 5;
}

TEST(BadStepsOptions, AreCheckedAndNamed) {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.fault.skip_batches = {0};
  EXPECT_THROW(
      {
        try {
          validate_job(o);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("--skip-batches 0"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace px
