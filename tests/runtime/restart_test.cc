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

TrainOptions job(int ranks, int64_t steps) {
  TrainOptions o = testing::tiny_gpt(testing::shared_text());
  o.gpt.dropout = 0;
  o.ranks = ranks;
  o.steps = steps;
  o.timeout_s = 2;
  return o;
}

// Every step `got` ran equals the reference's same step within 1e-5.
void expect_same_steps(const TrainResult& reference, const TrainResult& got, const std::string& what) {
  ASSERT_EQ(got.first_step + static_cast<int64_t>(got.losses.size()),
            reference.first_step + static_cast<int64_t>(reference.losses.size()))
      << what;
  for (size_t i = 0; i < got.losses.size(); ++i) {
    const size_t at = static_cast<size_t>(got.first_step - reference.first_step) + i;
    EXPECT_NEAR(got.losses[i], reference.losses[at], 1e-5 * std::abs(reference.losses[at]))
        << what << ": step " << got.first_step + 1 + static_cast<int64_t>(i);
  }
}

TEST(InProcessRestart, AKilledRankRestoresFromItsBuddysMemory) {
  const TrainOptions clean = job(4, 40);
  std::ostringstream quiet;
  const TrainResult reference = train(clean, quiet);

  TrainOptions o = clean;
  o.save_every = 10;  // snapshots in memory only: no --save
  o.max_restarts = 1;
  o.inject_fault.rank = 2;
  o.inject_fault.step = 37;
  std::ostringstream log;
  const TrainResult restarted = train(o, log);
  EXPECT_EQ(restarted.restarts, 1);
  EXPECT_EQ(restarted.first_step, 30) << log.str();
  EXPECT_NE(log.str().find("rank 2 killed: its memory is gone"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("from step 30 in memory (rank 2's from rank 3 copy)"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("time lost to failures"), std::string::npos) << log.str();
  EXPECT_GT(restarted.lost_seconds, 0);
  expect_same_steps(reference, restarted, "restarted from the buddy's memory");
}

TEST(InProcessRestart, WithoutACopyInMemoryItRestartsFromTheCheckpoint) {
  // One rank has no buddy: its memory dies with it, the disk remains.
  ScratchDir dir;
  const TrainOptions clean = job(1, 12);
  std::ostringstream quiet;
  const TrainResult reference = train(clean, quiet);
  TrainOptions o = clean;
  o.save = dir.file("ckpt");
  o.save_every = 4;
  o.max_restarts = 2;
  o.inject_fault.rank = 0;
  o.inject_fault.step = 7;
  std::ostringstream log;
  const TrainResult restarted = train(o, log);
  EXPECT_EQ(restarted.first_step, 4) << log.str();
  EXPECT_NE(log.str().find("from checkpoint '" + o.save + "'"), std::string::npos) << log.str();
  expect_same_steps(reference, restarted, "restarted from disk");
}

TEST(ElasticRestart, ALostRankLeavesThreeRanksThatMatchAResumeFromTheSameCheckpoint) {
  ScratchDir dir;
  TrainOptions o = job(4, 16);
  o.save = dir.file("ckpt");
  o.save_every = 5;
  o.keep_last = 4;  // 16, 15, 10 and 5
  o.max_restarts = 1;
  o.min_ranks = 3;
  o.inject_fault.rank = 2;
  o.inject_fault.step = 8;
  o.inject_fault.mode = "lost";
  std::ostringstream log;
  const TrainResult elastic = train(o, log);
  EXPECT_EQ(elastic.first_step, 5) << log.str();
  EXPECT_NE(log.str().find("restart 1 of 1: 3 ranks"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("continuing at 3 ranks"), std::string::npos) << log.str();
  for (int64_t step : {5, 10, 15}) EXPECT_TRUE(fs::exists(kept_checkpoint_path(o.save, step))) << step;

  TrainOptions resumed = job(3, 16);
  resumed.resume = kept_checkpoint_path(o.save, 5);
  std::ostringstream quiet;
  expect_same_steps(train(resumed, quiet), elastic, "elastic restart at 3 ranks");
}

TEST(ElasticRestart, LosingMoreRanksThanMinRanksAllowsIsANamedError) {
  TrainOptions o = job(4, 10);
  o.save_every = 5;
  o.max_restarts = 1;
  o.min_ranks = 4;
  o.inject_fault.rank = 1;
  o.inject_fault.step = 7;
  o.inject_fault.mode = "lost";
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
