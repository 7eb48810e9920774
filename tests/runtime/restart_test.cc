// Restarts in process (docs/fault_tolerance.md): a job whose rank dies
// restarts from every rank's in-memory snapshot (the dead rank's from its
// buddy), else from the latest checkpoint on disk; a rank lost for good
// makes it continue with fewer ranks. Every step after the restart equals
// the fault-free run's (or, elastic, a run resumed at the new rank count
// from the same checkpoint).
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/launch/launch.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::ScratchDir;
namespace fs = std::filesystem;

JobSpec job(int ranks, int64_t steps) {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt.dropout = 0;
  o.launch.ranks = ranks;
  o.run.steps = steps;
  o.fault.timeout_s = 2;
  return o;
}

// Every step `got` ran equals the reference's same step within 1e-5.
void expect_same_steps(const JobResult& reference, const JobResult& got, const std::string& what) {
  ASSERT_EQ(got.run.first_step + static_cast<int64_t>(got.run.losses.size()),
            reference.run.first_step + static_cast<int64_t>(reference.run.losses.size()))
      << what;
  for (size_t i = 0; i < got.run.losses.size(); ++i) {
    const size_t at = static_cast<size_t>(got.run.first_step - reference.run.first_step) + i;
    EXPECT_NEAR(got.run.losses[i], reference.run.losses[at], 1e-5 * std::abs(reference.run.losses[at]))
        << what << ": step " << got.run.first_step + 1 + static_cast<int64_t>(i);
  }
}

TEST(InProcessRestart, AKilledRankRestoresFromItsBuddysMemory) {
  const JobSpec clean = job(4, 40);
  std::ostringstream quiet;
  const JobResult reference = train(clean, quiet);

  JobSpec o = clean;
  o.checkpoint.save_every = 10;  // snapshots in memory only: no --save
  o.launch.max_restarts = 1;
  o.fault.inject_fault.rank = 2;
  o.fault.inject_fault.step = 37;
  std::ostringstream log;
  const JobResult restarted = train(o, log);
  EXPECT_EQ(restarted.restarts, 1);
  EXPECT_EQ(restarted.run.first_step, 30) << log.str();
  EXPECT_NE(log.str().find("rank 2 killed: its memory is gone"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("from step 30 in memory (rank 2's from rank 3 copy)"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("time lost to failures"), std::string::npos) << log.str();
  EXPECT_GT(restarted.lost_seconds, 0);
  expect_same_steps(reference, restarted, "restarted from the buddy's memory");
}

TEST(InProcessRestart, WithoutACopyInMemoryItRestartsFromTheCheckpoint) {
  // One rank has no buddy: its memory dies with it, the disk remains.
  ScratchDir dir;
  const JobSpec clean = job(1, 12);
  std::ostringstream quiet;
  const JobResult reference = train(clean, quiet);
  JobSpec o = clean;
  o.checkpoint.save = dir.file("ckpt");
  o.checkpoint.save_every = 4;
  o.launch.max_restarts = 2;
  o.fault.inject_fault.rank = 0;
  o.fault.inject_fault.step = 7;
  std::ostringstream log;
  const JobResult restarted = train(o, log);
  EXPECT_EQ(restarted.run.first_step, 4) << log.str();
  EXPECT_NE(log.str().find("from checkpoint '" + o.checkpoint.save + "'"), std::string::npos) << log.str();
  expect_same_steps(reference, restarted, "restarted from disk");
}

TEST(ElasticRestart, ALostRankLeavesThreeRanksThatMatchAResumeFromTheSameCheckpoint) {
  ScratchDir dir;
  JobSpec o = job(4, 16);
  o.checkpoint.save = dir.file("ckpt");
  o.checkpoint.save_every = 5;
  o.checkpoint.keep_last = 4;  // 16, 15, 10 and 5
  o.launch.max_restarts = 1;
  o.launch.min_ranks = 3;
  o.fault.inject_fault.rank = 2;
  o.fault.inject_fault.step = 8;
  o.fault.inject_fault.mode = "lost";
  std::ostringstream log;
  const JobResult elastic = train(o, log);
  EXPECT_EQ(elastic.run.first_step, 5) << log.str();
  EXPECT_NE(log.str().find("restart 1 of 1: 3 ranks"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("continuing at 3 ranks"), std::string::npos) << log.str();
  for (int64_t step : {5, 10, 15}) EXPECT_TRUE(fs::exists(kept_checkpoint_path(o.checkpoint.save, step))) << step;

  JobSpec resumed = job(3, 16);
  resumed.checkpoint.resume = kept_checkpoint_path(o.checkpoint.save, 5);
  std::ostringstream quiet;
  expect_same_steps(train(resumed, quiet), elastic, "elastic restart at 3 ranks");
}

TEST(ElasticRestart, LosingMoreRanksThanMinRanksAllowsIsANamedError) {
  JobSpec o = job(4, 10);
  o.checkpoint.save_every = 5;
  o.launch.max_restarts = 1;
  o.launch.min_ranks = 4;
  o.fault.inject_fault.rank = 1;
  o.fault.inject_fault.step = 7;
  o.fault.inject_fault.mode = "lost";
  std::ostringstream log;
  try {
    train(o, log);
    FAIL() << "losing a rank below --min-ranks must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 rank lost for good leave 3 of 4; --min-ranks 4"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace px
