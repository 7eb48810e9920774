// Compressed data parallelism resumed from a checkpoint continues exactly:
// each rank's error-feedback residual (and PowerSGD's warm-start Q, and DGC's
// velocity) is saved with the checkpoint and taken back at the same rank
// count, so the resumed steps' losses equal the uninterrupted run's. At
// another rank count the residuals restart at zero, and the log says so.
#include <gtest/gtest.h>

#include <sstream>

#include "parallel/strategy_equivalence.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

constexpr int kCheckpointedSteps = 30, kStop = 15;

void expect_resume_continues(JobSpec o, const std::string& what) {
  testing::ScratchDir dir;
  o.run.steps = kCheckpointedSteps;
  o.optimizer.schedule.total = kCheckpointedSteps;
  o.launch.ranks = 3;
  const std::vector<double> whole = testing::train_losses(o);
  JobSpec first = o;
  first.run.stop_after = kStop;
  first.checkpoint.save = dir.file("ckpt");
  testing::train_losses(first);
  JobSpec second = o;
  second.checkpoint.resume = first.checkpoint.save;
  std::ostringstream log;
  const std::vector<double> tail = train(second, log).run.losses;
  EXPECT_NE(log.str().find("restored the error-feedback state of 3 ranks"), std::string::npos) << log.str();
  testing::expect_same_losses(std::vector<double>(whole.begin() + kStop, whole.end()), tail, 1e-5,
                              what + " resumed at step " + std::to_string(kStop));

  JobSpec other = second;  // another rank count: residuals start at zero
  other.launch.ranks = 2;
  std::ostringstream other_log;
  train(other, other_log);
  EXPECT_NE(other_log.str().find("compression state not restored (it holds 3 ranks' residuals, this run has 2)"),
            std::string::npos)
      << other_log.str();
}

TEST(CompressionCheckpoint, TopKWithMomentumCorrectionResumesExactly) {
  JobSpec o = testing::tiny_cnn();  // SGD momentum: DGC velocity + residual
  o.strategy.compression = comm::compression::Spec::parse("topk:0.05");
  expect_resume_continues(o, "cnn topk:0.05");
}

TEST(CompressionCheckpoint, PowerSgdResumesExactly) {
  testing::ScratchDir text_dir;
  JobSpec o = testing::tiny_gpt(testing::write_text(text_dir));  // residual + warm-start Q
  o.data.batch = 6;
  o.strategy.compression = comm::compression::Spec::parse("powersgd:2");
  expect_resume_continues(o, "gpt powersgd:2");
}

}  // namespace
}  // namespace px
