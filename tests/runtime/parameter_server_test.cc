// Parameter-server training against the data-parallel trainer: BSP over 1
// and 2 servers gives a single rank's per-step losses on the same global
// batch (the rank's rows are the workers' shards concatenated); ASP and SSP
// train; SSP never computes with parameters staler than its bound even with
// one worker slowed down (while ASP, so slowed, does); a BSP checkpoint
// resumes in the data-parallel trainer; bad options are named errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <sstream>

#include "runtime/trainer.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"
#include "parallel/strategy_equivalence.h"

namespace px {
namespace {

constexpr double kTolerance = 1e-5;

TrainOptions cnn_job(int64_t steps) {
  TrainOptions o = testing::tiny_cnn();
  o.steps = steps;
  o.schedule.total = steps;
  return o;
}

TrainOptions with_ps(TrainOptions o, const std::string& mode, int servers, int workers, int staleness = 0) {
  o.ps = {.mode = mode, .servers = servers, .staleness = staleness};
  o.ranks = servers + workers;
  return o;
}

TrainResult run(const TrainOptions& o) {
  std::ostringstream log;
  return train(o, log);
}

double mean_of_last(const std::vector<double>& losses, size_t n) {
  return std::accumulate(losses.end() - static_cast<std::ptrdiff_t>(n), losses.end(), 0.0) / double(n);
}

class BspMatchesOneRank : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(BspMatchesOneRank, Cnn) {
  const auto [servers, workers] = GetParam();
  TrainOptions o = cnn_job(20);
  static const std::vector<double> single = testing::train_losses(o);
  TrainResult r = run(with_ps(o, "bsp", servers, workers));
  testing::expect_same_losses(single, r.losses, kTolerance,
                              fmt::format("bsp with {} servers, {} workers", servers, workers));
  EXPECT_EQ(r.max_staleness, 0);
}
INSTANTIATE_TEST_SUITE_P(Layouts, BspMatchesOneRank,
                         ::testing::Values(std::tuple{1, 2}, std::tuple{1, 3}, std::tuple{2, 2}, std::tuple{2, 3}));

// Dropout and AdamW: the workers draw the masks a single rank draws for their rows.
TEST(ParameterServer, BspGptWithDropoutMatchesOneRank) {
  testing::ScratchDir dir;
  TrainOptions o = testing::tiny_gpt(testing::write_text(dir));
  o.batch = 6;
  o.grad_clip = 0;  // workers clip their own gradient; off, the sum is the global one
  const std::vector<double> single = testing::train_losses(o);
  testing::expect_same_losses(single, run(with_ps(o, "bsp", 2, 3)).losses, kTolerance, "gpt bsp 2 servers");
}

// 120 steps of the tiny CNN take a single rank from ln 10 = 2.30 to ~0.77.
TEST(ParameterServer, AspAndSspReduceTheLoss) {
  for (const auto& [mode, servers, staleness] :
       {std::tuple{"asp", 1, 0}, std::tuple{"asp", 2, 0}, std::tuple{"ssp", 1, 2}, std::tuple{"ssp", 2, 1}}) {
    TrainOptions o = cnn_job(120);
    TrainResult r = run(with_ps(o, mode, servers, 3, staleness));
    ASSERT_EQ(r.losses.size(), 120u) << mode;
    EXPECT_LT(mean_of_last(r.losses, 10), 0.6 * std::log(10.0)) << mode << " with " << servers << " servers";
    EXPECT_GT(r.evaluation.accuracy, 0.5) << mode << " with " << servers << " servers";
  }
}

class SspStaleness : public ::testing::TestWithParam<int> {};

// The last worker sleeps 15 ms a step, so the others run ahead until the bound stops them.
TEST_P(SspStaleness, NeverExceedsTheBoundWithASlowWorker) {
  const int bound = GetParam();
  TrainOptions o = with_ps(cnn_job(16), "ssp", 1, 3, bound);
  o.ps.slow_worker_ms = 15;
  TrainResult r = run(o);
  EXPECT_LE(r.max_staleness, bound);
  if (bound > 0) {
    EXPECT_GE(r.max_staleness, 1) << "the fast workers never ran ahead: the test shows nothing";
  }
}
INSTANTIATE_TEST_SUITE_P(Bounds, SspStaleness, ::testing::Values(0, 1, 3));

TEST(ParameterServer, AspWithASlowWorkerRunsPastAnyBound) {
  TrainOptions o = with_ps(cnn_job(16), "asp", 2, 3);
  o.ps.slow_worker_ms = 15;
  EXPECT_GT(run(o).max_staleness, 3);
}

// BSP is synchronous SGD: stopped and saved under it, the checkpoint resumes
// in the data-parallel trainer (2 ranks) and continues the single-rank run.
TEST(ParameterServer, BspCheckpointResumesDataParallel) {
  testing::ScratchDir dir;
  TrainOptions o = cnn_job(12);
  const std::vector<double> single = testing::train_losses(o);
  TrainOptions head = with_ps(o, "bsp", 2, 2);
  head.save = dir.file("ckpt");
  head.stop_after = 5;
  TrainResult first = run(head);
  TrainOptions tail = o;
  tail.ranks = 2;
  tail.resume = dir.file("ckpt");
  TrainResult rest = run(tail);
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), rest.losses.begin(), rest.losses.end());
  testing::expect_same_losses(single, joined, kTolerance, "bsp head + data-parallel tail");
}

void expect_error(const TrainOptions& o, const std::string& fragment) {
  try {
    run(o);
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(ParameterServer, BadOptionsAreNamedErrors) {
  const TrainOptions o = cnn_job(2);
  expect_error(with_ps(o, "hogwild", 1, 2), "parameter-server mode 'hogwild' is unknown: expected bsp, asp or ssp");
  expect_error(with_ps(o, "asp", 0, 2), "--ps-servers 0 must be >= 1");
  TrainOptions all_servers = with_ps(o, "asp", 3, 0);
  expect_error(all_servers, "--ps-servers 3 leaves no worker among 3 ranks");
  expect_error(with_ps(o, "ssp", 1, 2, -1), "--staleness -1 must be >= 0");
  expect_error(with_ps(o, "asp", 1, 2, 2), "--staleness 2 is for --ps ssp");
  TrainOptions no_mode = o;
  no_mode.ps.servers = 2;
  expect_error(no_mode, "--ps-servers 2 needs a parameter-server mode");
  TrainOptions periodic = with_ps(o, "bsp", 1, 2);
  periodic.save_every = 1;
  expect_error(periodic, "--save-every 1 is not supported with --ps bsp");
}

}  // namespace
}  // namespace px
