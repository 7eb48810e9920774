// Parameter-server training against the data-parallel trainer: BSP over 1
// and 2 servers gives a single rank's per-step losses on the same global
// batch (the rank's rows are the workers' shards concatenated); with backup
// workers each update is the mean over the rows of the pushes it took (one
// rank trained on those rows only) and a straggler's gradients are dropped;
// ASP and SSP train; SSP never computes with parameters staler than its bound
// even with one worker slowed down (while ASP, so slowed, does); a BSP
// checkpoint resumes in the data-parallel trainer; bad options are named
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <sstream>

#include "parallel/lower.h"
#include "parallel/row_split.h"
#include "runtime/executor/program_executor.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/tasks/task.h"
#include "runtime/launch/launch.h"
#include "testing/expect_train_error.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"
#include "parallel/strategy_equivalence.h"

namespace px {
namespace {

constexpr double kTolerance = 1e-5;

JobSpec cnn_job(int64_t steps) {
  JobSpec o = testing::tiny_cnn();
  o.run.steps = steps;
  o.optimizer.schedule.total = steps;
  return o;
}

JobSpec with_ps(JobSpec o, const std::string& mode, int servers, int workers, int staleness = 0) {
  o.ps = {.mode = mode, .servers = servers, .staleness = staleness};
  o.launch.ranks = servers + workers;
  return o;
}

JobResult run(const JobSpec& o) {
  std::ostringstream log;
  return train(o, log);
}

// The last worker sleeps `ms` before each step's compute (--inject-delay).
JobSpec with_straggler(JobSpec o, int64_t ms) {
  o.fault.inject_delay_rank = o.launch.ranks - 1;
  o.fault.inject_delay_ms = ms;
  return o;
}

double mean_of_last(const std::vector<double>& losses, size_t n) {
  return std::accumulate(losses.end() - static_cast<std::ptrdiff_t>(n), losses.end(), 0.0) / double(n);
}

class BspMatchesOneRank : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(BspMatchesOneRank, Cnn) {
  const auto [servers, workers] = GetParam();
  JobSpec o = cnn_job(20);
  static const std::vector<double> single = testing::train_losses(o);
  JobResult r = run(with_ps(o, "bsp", servers, workers));
  testing::expect_same_losses(single, r.run.losses, kTolerance,
                              fmt::format("bsp with {} servers, {} workers", servers, workers));
  EXPECT_EQ(r.parameter_server->max_staleness, 0);
  EXPECT_EQ(r.parameter_server->dropped_pushes, std::vector<int64_t>(static_cast<size_t>(workers), 0));
  EXPECT_EQ(r.parameter_server->gradients_per_update, std::vector<int>(20, workers));
}
INSTANTIATE_TEST_SUITE_P(Layouts, BspMatchesOneRank,
                         ::testing::Values(std::tuple{1, 2}, std::tuple{1, 3}, std::tuple{2, 2}, std::tuple{2, 3}));

// Dropout and AdamW: the workers draw the masks a single rank draws for their rows.
TEST(ParameterServer, BspGptWithDropoutMatchesOneRank) {
  testing::ScratchDir dir;
  JobSpec o = testing::tiny_gpt(testing::write_text(dir));
  o.data.batch = 6;
  o.optimizer.grad_clip = 0;  // workers clip their own gradient; off, the sum is the global one
  const std::vector<double> single = testing::train_losses(o);
  testing::expect_same_losses(single, run(with_ps(o, "bsp", 2, 3)).run.losses, kTolerance, "gpt bsp 2 servers");
}

// 120 steps of the tiny CNN take a single rank from ln 10 = 2.30 to ~0.77.
// Each worker clips its gradient's norm at 1, as asynchronous SGD is run: a
// worker starved by a loaded host (TSan beside another suite) pushes
// gradients of weights many updates old, and unclipped they once left the
// ReLUs dead and the loss at ln 10 (2 runs in 9 so loaded).
TEST(ParameterServer, AspAndSspReduceTheLoss) {
  for (const auto& [mode, servers, staleness] :
       {std::tuple{"asp", 1, 0}, std::tuple{"asp", 2, 0}, std::tuple{"ssp", 1, 2}, std::tuple{"ssp", 2, 1}}) {
    JobSpec o = cnn_job(120);
    o.optimizer.grad_clip = 1.0;
    JobResult r = run(with_ps(o, mode, servers, 3, staleness));
    ASSERT_EQ(r.run.losses.size(), 120u) << mode;
    EXPECT_LT(mean_of_last(r.run.losses, 10), 0.6 * std::log(10.0)) << mode << " with " << servers << " servers";
    EXPECT_GT(r.run.evaluation.accuracy, 0.5) << mode << " with " << servers << " servers";
  }
}

class SspStaleness : public ::testing::TestWithParam<int> {};

// The last worker sleeps 15 ms a step, so the others run ahead until the bound stops them.
TEST_P(SspStaleness, NeverExceedsTheBoundWithASlowWorker) {
  const int bound = GetParam();
  JobResult r = run(with_straggler(with_ps(cnn_job(16), "ssp", 1, 3, bound), 15));
  EXPECT_LE(r.parameter_server->max_staleness, bound);
  if (bound > 0) {
    EXPECT_GE(r.parameter_server->max_staleness, 1) << "the fast workers never ran ahead: the test shows nothing";
  }
}
INSTANTIATE_TEST_SUITE_P(Bounds, SspStaleness, ::testing::Values(0, 1, 3));

TEST(ParameterServer, AspWithASlowWorkerRunsPastAnyBound) {
  EXPECT_GT(run(with_straggler(with_ps(cnn_job(16), "asp", 2, 3), 15)).parameter_server->max_staleness, 3);
}

// BSP is synchronous SGD: stopped and saved under it, the checkpoint resumes
// in the data-parallel trainer (2 ranks) and continues the single-rank run.
TEST(ParameterServer, BspCheckpointResumesDataParallel) {
  testing::ScratchDir dir;
  JobSpec o = cnn_job(12);
  const std::vector<double> single = testing::train_losses(o);
  JobSpec head = with_ps(o, "bsp", 2, 2);
  head.checkpoint.save = dir.file("ckpt");
  head.run.stop_after = 5;
  JobResult first = run(head);
  JobSpec tail = o;
  tail.launch.ranks = 2;
  tail.checkpoint.resume = dir.file("ckpt");
  JobResult rest = run(tail);
  std::vector<double> joined = first.run.losses;
  joined.insert(joined.end(), rest.run.losses.begin(), rest.run.losses.end());
  testing::expect_same_losses(single, joined, kTolerance, "bsp head + data-parallel tail");
}

// One rank trained on rows [begin, end) of every global batch only: what BSP
// with backup workers must equal when the same workers' pushes always make
// the update (the mean gradient over their rows, the mean loss over them).
std::vector<double> one_rank_on_rows(const JobSpec& o, int64_t begin, int64_t end) {
  std::unique_ptr<Task> task = make_task(o.model, o.data, o.run.seed);
  const nn::Model model = task->build(end - begin, true);
  parallel::Strategy strategy = parallel::data_parallel(1, batch_input_names(model));
  strategy.lowering.global_norm = false;
  ProgramExecutor executor(parallel::lower({.forward = &model.graph, .loss = model.loss}, strategy, 0), AxisGroups{},
                           o.optimizer.update);
  executor.set_parameters(ParamStore::initialize(task->build(1, false).graph, o.run.seed));
  std::vector<double> losses;
  for (int64_t step = 0; step < o.run.steps; ++step) {
    DataBatch batch = task->next_batch({}, 0);  // (B, ...) the whole global batch
    StepResult out = executor.run(
        {.feeds = feeds_of(model, {batch.inputs.slice_rows(begin, end), batch.targets.slice_rows(begin, end)}),
         .seed = o.run.seed,
         .row_offset = begin,
         .lr = o.optimizer.schedule.at(step)});
    losses.push_back(out.loss);
  }
  return losses;
}

// Deterministic without timing: server 0 takes worker 0's pushes as arriving
// after the others' (ParameterServerOptions::late_worker), so with one backup
// worker every update is workers 1 and 2's: rows [5, 16) of each global batch
// of 16, 11 rows, rescaled from their 11/16 share to the mean over the 11.
TEST(ParameterServer, BackupWorkersUpdateWithTheMeanOverTheRowsThatArrived) {
  const JobSpec o = cnn_job(20);
  const parallel::RowRange worker0 = parallel::shard_rows(o.data.batch, 0, 3);
  ASSERT_EQ(worker0, (parallel::RowRange{0, 5}));
  const std::vector<double> reference = one_rank_on_rows(o, worker0.end, o.data.batch);
  for (int servers : {1, 2}) {  // 2: server 1 must take server 0's choice, not its own arrival order
    JobSpec backup = with_ps(o, "bsp", servers, 3);
    backup.ps.backup_workers = 1;
    backup.ps.late_worker = 0;
    JobResult r = run(backup);
    testing::expect_same_losses(reference, r.run.losses, kTolerance,
                                fmt::format("bsp, 1 backup worker, worker 0 always last, {} servers", servers));
    EXPECT_EQ(r.parameter_server->gradients_per_update, std::vector<int>(20, 2));
    ASSERT_EQ(r.parameter_server->dropped_pushes.size(), 3u);
    // Worker 0's push of a clock is dropped, or it skipped the clock: the two
    // others are not held back by it and may finish all 20 (~20 ms) before
    // it even starts.
    EXPECT_LE(r.parameter_server->dropped_pushes[0], 20);
    EXPECT_EQ(r.parameter_server->dropped_pushes[1], 0);
    EXPECT_EQ(r.parameter_server->dropped_pushes[2], 0);
  }
}

// A straggler sleeping 15 ms a step, 1 backup worker: the others' updates go
// on without it; its late gradients are dropped and it jumps to the current
// step. Over 1 and 2 servers (2: the servers agree on each update's workers).
// 200 steps: the fast workers take ~1 ms a step, so fewer would let them
// finish while the straggler still starts up (it would only skip clocks).
TEST(ParameterServer, BackupWorkersDropAStragglersGradients) {
  for (int servers : {1, 2}) {
    JobSpec o = with_straggler(with_ps(cnn_job(200), "bsp", servers, 3), 15);
    o.ps.backup_workers = 1;
    JobResult r = run(o);
    ASSERT_EQ(r.run.losses.size(), 200u) << servers << " servers";
    EXPECT_EQ(r.parameter_server->gradients_per_update, std::vector<int>(200, 2)) << servers << " servers";
    ASSERT_EQ(r.parameter_server->dropped_pushes.size(), 3u);
    EXPECT_GT(r.parameter_server->dropped_pushes[2], 0) << "the straggler's gradients were all in time: the test shows nothing";
    EXPECT_LT(mean_of_last(r.run.losses, 5), r.run.losses.front()) << servers << " servers";
    EXPECT_EQ(r.parameter_server->max_staleness, 0);  // every update still computed on the current parameters
  }
}

// No straggler: whichever pushes come last are dropped (maybe none), the run
// ends (no worker left waiting at the last clocks) and trains.
TEST(ParameterServer, BackupWorkersWithoutAStragglerTrain) {
  for (const auto& [servers, workers, backups] : {std::tuple{1, 4, 1}, std::tuple{2, 4, 2}, std::tuple{2, 3, 1}}) {
    JobSpec o = with_ps(cnn_job(60), "bsp", servers, workers);
    o.ps.backup_workers = backups;
    JobResult r = run(o);
    const std::string what = fmt::format("{} servers, {} workers, {} backups", servers, workers, backups);
    ASSERT_EQ(r.run.losses.size(), 60u) << what;
    EXPECT_EQ(r.parameter_server->gradients_per_update, std::vector<int>(60, workers - backups)) << what;
    // Every clock leaves out `backups` workers: their push is dropped or they skipped it.
    EXPECT_LE(std::accumulate(r.parameter_server->dropped_pushes.begin(), r.parameter_server->dropped_pushes.end(), int64_t{0}), 60 * backups) << what;
    EXPECT_LT(mean_of_last(r.run.losses, 10), 0.8 * std::log(10.0)) << what;
    // Which pushes drop depends on timing, and 60 steps of a tiny CNN land
    // anywhere from 0.292 (seen under ThreadSanitizer, 2026-11-29) upwards:
    // 0.25 is two and a half times chance and still fails a run that does
    // not learn.
    EXPECT_GT(r.run.evaluation.accuracy, 0.25) << what;
  }
}

TEST(ParameterServer, BadOptionsAreNamedErrors) {
  const JobSpec o = cnn_job(2);
  testing::expect_train_error(with_ps(o, "hogwild", 1, 2), "parameter-server mode 'hogwild' is unknown: expected bsp, asp or ssp");
  testing::expect_train_error(with_ps(o, "asp", 0, 2), "--ps-servers 0 must be >= 1");
  JobSpec all_servers = with_ps(o, "asp", 3, 0);
  testing::expect_train_error(all_servers, "--ps-servers 3 leaves no worker among 3 ranks");
  testing::expect_train_error(with_ps(o, "ssp", 1, 2, -1), "--staleness -1 must be >= 0");
  testing::expect_train_error(with_ps(o, "asp", 1, 2, 2), "--staleness 2 is for --ps ssp");
  JobSpec no_mode = o;
  no_mode.ps.servers = 2;
  testing::expect_train_error(no_mode, "--ps-servers 2 needs a parameter-server mode");
  JobSpec periodic = with_ps(o, "bsp", 1, 2);
  periodic.checkpoint.save_every = 1;
  testing::expect_train_error(periodic, "--save-every 1 is not supported with --ps bsp");
  JobSpec backup = with_ps(o, "bsp", 2, 3);
  backup.ps.backup_workers = 3;
  testing::expect_train_error(backup, "--backup-workers 3 leaves no gradient for an update: expected fewer than the 3 workers "
                       "(5 ranks - 2 servers)");
  backup.ps.backup_workers = -1;
  testing::expect_train_error(backup, "--backup-workers -1 must be >= 0");
  JobSpec async_backup = with_ps(o, "asp", 1, 3);
  async_backup.ps.backup_workers = 1;
  testing::expect_train_error(async_backup, "--backup-workers 1 is for --ps bsp; mode 'asp' applies every gradient as it arrives");
  JobSpec no_mode_backup = o;
  no_mode_backup.launch.ranks = 3;
  no_mode_backup.ps.backup_workers = 1;
  testing::expect_train_error(no_mode_backup, "--backup-workers 1 needs --ps bsp");
  JobSpec slow_server = with_ps(o, "bsp", 2, 2);
  slow_server.fault.inject_delay_rank = 1;
  slow_server.fault.inject_delay_ms = 10;
  testing::expect_train_error(slow_server, "--inject-delay names rank 1, a parameter server (ranks 0..1): name a worker rank, 2..3");
}

}  // namespace
}  // namespace px
