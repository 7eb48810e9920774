// Synchronized replicas (--sync partial-reduce | gossip): the group
// scheduler's rules and the straggler scores on their own; partial reduce
// whose groups are every replica each step equals bulk-synchronous data
// parallelism (SGD with momentum, no clipping: parameter averaging is then
// gradient averaging), on even and uneven row shares and odd and even
// replica counts; partial groups and gossip train; a rank killed in
// process is left out and named while the others finish; bad options are
// named errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "parallel/strategy_equivalence.h"
#include "runtime/launch/launch.h"
#include "parallel/row_split.h"
#include "runtime/sync/group_scheduler.h"
#include "runtime/train/straggler_scores.h"
#include "runtime/train/straggler_watch.h"
#include "testing/expect_train_error.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using sync::GroupScheduler;
using sync::Round;

uint64_t bits(std::initializer_list<int> ranks) {
  uint64_t out = 0;
  for (const int r : ranks) out |= uint64_t{1} << r;
  return out;
}

TEST(GroupScheduler, EveryReplicaWhenTheGroupIsTheWorld) {
  GroupScheduler s({.ranks = 3, .min_group = 3, .batch_rows = 12, .end_step = 2});
  s.ready(0, 1, 4);
  s.ready(2, 1, 4);
  EXPECT_FALSE(s.next());
  s.ready(1, 1, 4);
  const std::optional<Round> round = s.next();
  ASSERT_TRUE(round);
  EXPECT_EQ(round->members, bits({0, 1, 2}));
  EXPECT_EQ(round->global_step, 1);
  EXPECT_FALSE(round->stop);
  for (int r = 0; r < 3; ++r) s.ready(r, 2, 4);
  const std::optional<Round> last = s.next();
  ASSERT_TRUE(last);
  EXPECT_TRUE(last->stop && last->full);
  EXPECT_TRUE(s.stopped());
  EXPECT_FALSE(s.next());
}

TEST(GroupScheduler, ReadyReplicasGroupWithoutTheSlowOne) {
  GroupScheduler s({.ranks = 4, .min_group = 2, .staleness = 8, .batch_rows = 4, .end_step = 100});
  s.ready(0, 1, 1);
  EXPECT_FALSE(s.next());  // one is not a group
  s.ready(1, 1, 1);
  std::optional<Round> round = s.next();
  ASSERT_TRUE(round);
  EXPECT_EQ(round->members, bits({0, 1}));
  EXPECT_EQ(round->staleness, 0);
  s.ready(0, 2, 1);
  s.ready(3, 1, 1);
  round = s.next();
  ASSERT_TRUE(round);
  EXPECT_EQ(round->members, bits({0, 3}));
  EXPECT_EQ(round->staleness, 1);
}

TEST(GroupScheduler, StalenessHoldsARunawayUntilTheSlowestJoins) {
  GroupScheduler s({.ranks = 3, .min_group = 2, .staleness = 2, .batch_rows = 3, .end_step = 100});
  // Ranks 0 and 1 race ahead while rank 2 is still at its first step.
  for (int step = 1; step <= 3; ++step) {
    s.ready(0, step, 1);
    s.ready(1, step, 1);
    if (step <= 2) {
      ASSERT_TRUE(s.next());
    } else {
      EXPECT_FALSE(s.next()) << "3 steps ahead of the slowest (at 0) with a bound of 2";
    }
  }
  s.ready(2, 1, 1);
  const std::optional<Round> round = s.next();
  ASSERT_TRUE(round);
  EXPECT_EQ(round->members, bits({0, 1, 2}));
  EXPECT_EQ(round->staleness, 2);
}

// A round brings a stale member up to its newest member's version (the
// average holds those steps), and says how far behind each member was:
// its weight in the average is its rows over one plus that.
TEST(GroupScheduler, ARoundBringsAStaleMemberToTheNewestVersion) {
  GroupScheduler s({.ranks = 3, .min_group = 2, .staleness = 2, .batch_rows = 3, .end_step = 100});
  for (int step = 1; step <= 2; ++step) {
    s.ready(0, step, 1);
    s.ready(1, step, 1);
    ASSERT_TRUE(s.next());
  }
  s.ready(2, 1, 1);  // alone: no round
  EXPECT_FALSE(s.next());
  s.ready(0, 3, 1);
  const std::optional<Round> round = s.next();
  ASSERT_TRUE(round);
  EXPECT_EQ(round->members, bits({0, 2}));
  EXPECT_EQ(round->staleness, 2);
  EXPECT_EQ(round->behind, (std::vector<int64_t>{0, 0, 2}));
  EXPECT_EQ(s.version(2), 3);
  EXPECT_EQ(s.steps(2), 1);
  // Rank 1 (version 2) is now the oldest; rank 2 no longer is.
  s.ready(2, 2, 1);
  s.ready(1, 3, 1);
  const std::optional<Round> next = s.next();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->members, bits({1, 2}));
  EXPECT_EQ(next->behind, (std::vector<int64_t>{0, 1, 0}));
}

TEST(GroupScheduler, BoundariesMakeRoundsOfEveryLiveReplica) {
  GroupScheduler s({.ranks = 3, .min_group = 2, .batch_rows = 3, .end_step = 100, .eval_every = 2, .save_every = 4});
  int64_t rounds_with_everyone = 0;
  for (int step = 1; step <= 4; ++step) {
    for (int r = 0; r < 3; ++r) s.ready(r, step, 1);
    const std::optional<Round> round = s.next();
    ASSERT_TRUE(round);
    EXPECT_EQ(round->members, bits({0, 1, 2}));
    EXPECT_EQ(round->evaluate, step % 2 == 0) << step;
    EXPECT_EQ(round->save, step == 4) << step;
    EXPECT_EQ(round->full, step == 4) << step;
    rounds_with_everyone += round->evaluate;
  }
  EXPECT_EQ(rounds_with_everyone, 2);
}

TEST(GroupScheduler, ALeaverIsInNoLaterRound) {
  GroupScheduler s({.ranks = 3, .min_group = 3, .batch_rows = 3, .end_step = 100});
  s.leave(1);
  s.ready(0, 1, 1);
  s.ready(2, 1, 1);
  const std::optional<Round> round = s.next();  // the group shrinks to the live replicas
  ASSERT_TRUE(round);
  EXPECT_EQ(round->members, bits({0, 2}));
  EXPECT_EQ(s.live_count(), 2);
}

TEST(StragglerScores, ASlowRankIsNamedAndRecovers) {
  StragglerScores scores(3, 1.5);
  std::optional<StragglerChange> named;
  int named_after = -1;
  for (int step = 0; step < 12 && !named; ++step) {
    scores.record(0, 1.0, 0.0);
    scores.record(1, 1.1, 0.0);
    named = scores.record(2, 4.0, 0.0);
    if (named) named_after = step + 1;
  }
  ASSERT_TRUE(named);
  EXPECT_EQ(named->rank, 2);
  EXPECT_TRUE(named->straggling);
  EXPECT_NEAR(named->score, 4.0, 1e-9);
  EXPECT_EQ(named_after, kStragglerSteps);
  EXPECT_FALSE(scores.straggling(1));
  std::optional<StragglerChange> recovered;
  for (int step = 0; step < 10 && !recovered; ++step) {
    scores.record(0, 1.0, 0.0);
    recovered = scores.record(2, 1.0, 0.0);
  }
  ASSERT_TRUE(recovered);
  EXPECT_FALSE(recovered->straggling);
  EXPECT_NEAR(scores.vs_best(2), 1.0, 1e-9);
}

// Rows by measured rates: in proportion, in thousandths of the fastest,
// and never a rank without a row of the batch.
TEST(StragglerWatch, SharesFollowRatesAndLeaveNoRankEmpty) {
  EXPECT_EQ(shares_by_rate({10, 10, 2.5}, 32), (std::vector<int64_t>{1000, 1000, 250}));
  const std::vector<int64_t> shares = shares_by_rate({100, 100, 1}, 8);
  EXPECT_EQ(shares[0], 1000);
  EXPECT_GE(parallel::shard_rows(8, 2, 3, shares).size(), 1);
}

JobSpec sgd_job(int ranks, int64_t steps) {
  JobSpec o = testing::tiny_mlp();
  o.run.steps = steps;
  o.optimizer.schedule.total = steps;
  o.data.batch = 12;
  o.launch.ranks = ranks;
  return o;
}

JobResult train_quietly(const JobSpec& o) {
  std::ostringstream log;
  return train(o, log);
}

class FullGroupsMatchBulk : public ::testing::TestWithParam<std::tuple<int, std::vector<int64_t>>> {};

// Groups forced to every replica each step: the per-step loss (the
// members' rows-weighted loss) and the final evaluation are bulk
// data parallelism's.
TEST_P(FullGroupsMatchBulk, SgdWithMomentum) {
  const auto& [ranks, shares] = GetParam();
  JobSpec bulk = sgd_job(ranks, testing::kEquivalenceSteps);
  bulk.strategy.row_shares = shares;
  const JobResult expected = train_quietly(bulk);
  JobSpec partial = bulk;
  partial.sync = {.mode = "partial-reduce", .min_group = ranks};
  const JobResult got = train_quietly(partial);
  testing::expect_same_losses(expected.run.losses, got.run.losses, testing::kEquivalenceTolerance,
                              fmt::format("partial reduce, {} ranks, groups of all", ranks));
  EXPECT_NEAR(got.run.evaluation.loss, expected.run.evaluation.loss, 1e-5 * expected.run.evaluation.loss);
  ASSERT_TRUE(got.sync);
  EXPECT_EQ(got.sync->rounds, testing::kEquivalenceSteps);
  EXPECT_DOUBLE_EQ(got.sync->mean_group, ranks);
  EXPECT_EQ(got.sync->max_staleness, 0);
}
INSTANTIATE_TEST_SUITE_P(Shares, FullGroupsMatchBulk,
                         ::testing::Values(std::tuple{2, std::vector<int64_t>{}}, std::tuple{3, std::vector<int64_t>{}},
                                           std::tuple{3, std::vector<int64_t>{3, 2, 1}}));

// A GPT job for pipeline replicas: SGD with momentum, no dropout or
// clipping (parameter averaging then equals gradient averaging).
JobSpec sgd_gpt(int ranks, int64_t steps) {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt.dropout = 0;
  o.run.steps = steps;
  o.data.batch = 8;
  o.optimizer.schedule = {.kind = "constant", .lr = 0.05, .total = steps};
  o.optimizer.update = {.kind = "sgd", .momentum = 0.9};
  o.optimizer.grad_clip = 0;
  o.launch.ranks = ranks;
  return o;
}

// Replicas that are pipelines (SDPipe: all stages of a replica join its
// group), with micro-batches and uneven rows: groups of every replica are
// bulk pipeline x data parallelism, step by step and at the end.
TEST(Sync, PipelineReplicasInFullGroupsMatchBulk) {
  JobSpec bulk = sgd_gpt(4, testing::kEquivalenceSteps);
  bulk.strategy.pipeline_parallel = 2;
  bulk.strategy.micro_batches = 2;
  bulk.strategy.row_shares = {3, 1};
  const JobResult expected = train_quietly(bulk);
  JobSpec partial = bulk;
  partial.sync = {.mode = "partial-reduce", .min_group = 2};
  std::ostringstream log;
  const JobResult got = train(partial, log);
  EXPECT_NE(log.str().find("2 replicas (inproc) of 2 ranks each (mesh {pp:2, dp:1})"), std::string::npos)
      << log.str();
  testing::expect_same_losses(expected.run.losses, got.run.losses, testing::kEquivalenceTolerance,
                              "partial reduce of 2 pipelines, groups of all");
  EXPECT_NEAR(got.run.evaluation.loss, expected.run.evaluation.loss, 1e-5 * expected.run.evaluation.loss);
}

// Replicas of pipeline stages x tensor-parallel ranks under gossip train,
// and their checkpoint (whole tensors) resumes on one rank.
TEST(Sync, PipelineTensorReplicasGossipAndResumeAnywhere) {
  testing::ScratchDir dir;
  JobSpec o = sgd_gpt(8, 20);
  o.strategy.pipeline_parallel = 2;
  o.strategy.tensor_parallel = 2;
  o.sync.mode = "gossip";
  o.checkpoint.save = dir.path() + "/ckpt";
  const JobResult got = train_quietly(o);
  ASSERT_EQ(got.run.losses.size(), 20u);
  EXPECT_LT(got.run.losses.back(), got.run.losses.front());
  JobSpec one = sgd_gpt(1, 24);
  one.checkpoint.resume = o.checkpoint.save;
  std::ostringstream log;
  const JobResult resumed = train(one, log);
  EXPECT_NE(log.str().find("resumed from '" + o.checkpoint.save + "' at step 20"), std::string::npos) << log.str();
  EXPECT_EQ(resumed.run.losses.size(), 4u);
  EXPECT_NEAR(resumed.run.losses.front(), got.run.losses.back(), 0.1 * got.run.losses.back());
}

// Smaller groups and gossip's pairs train: the loss falls, and the end's
// model (every replica averaged) evaluates near bulk training's. Which
// replicas are ready together depends on the machine's load: alone the
// partial groups end within 1.1x of bulk's loss, but beside another test
// on this 2-core machine their groups shrink and grow staler, and one run
// ended at 1.29x. The bound allows that; exactness is FullGroupsMatchBulk's.
TEST(Sync, PartialGroupsAndGossipTrain) {
  JobSpec bulk = sgd_job(4, 60);
  const JobResult expected = train_quietly(bulk);
  for (const std::string mode : {"partial-reduce", "gossip"}) {
    JobSpec o = bulk;
    o.sync.mode = mode;
    o.run.eval_every = 20;
    const JobResult got = train_quietly(o);
    ASSERT_GE(got.run.losses.size(), 10u) << mode;
    const double first = got.run.losses.front(), last = got.run.losses.back();
    EXPECT_LT(last, 0.8 * first) << mode;
    EXPECT_LT(got.run.evaluation.loss, 1.5 * expected.run.evaluation.loss) << mode;
  }
}

// A rank killed in process under partial reduce is left out of later
// groups and named; the others finish the job without a restart.
TEST(Sync, AKilledRankIsLeftOutAndNamed) {
  testing::ScratchDir dir;
  JobSpec o = sgd_job(3, 30);
  o.sync.mode = "partial-reduce";
  o.fault.inject_fault = {.rank = 2, .step = 5, .mode = "kill"};
  o.fault.run_dir = dir.path() + "/run";  // keeps the metrics
  std::ostringstream log;
  const JobResult got = train(o, log);
  std::ifstream metrics(o.fault.run_dir + "/metrics.jsonl");
  const std::string lines((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
  EXPECT_NE(lines.find("\"left\":2"), std::string::npos) << lines.substr(0, 400);
  ASSERT_TRUE(got.sync);
  ASSERT_EQ(got.sync->left.size(), 1u) << log.str();
  EXPECT_NE(got.sync->left[0].find("rank 2 at its step 4"), std::string::npos) << got.sync->left[0];
  EXPECT_NE(log.str().find("partial reduce: rank 2 left"), std::string::npos) << log.str();
  EXPECT_EQ(got.restarts, 0);
  EXPECT_TRUE(std::isfinite(got.run.evaluation.loss));
}

// Bulk data parallelism scores its ranks too: a slowed rank is named
// while the job runs, and the others are not.
TEST(Stragglers, ASlowRankIsNamedInBulkTraining) {
  JobSpec o = sgd_job(3, 30);
  o.fault.inject_delay_rank = 2;
  o.fault.inject_delay_ms = 20;
  std::ostringstream log;
  const JobResult got = train(o, log);
  ASSERT_TRUE(got.data_parallel);
  const nlohmann::json& s = got.data_parallel->stragglers;
  ASSERT_TRUE(s.contains("2")) << s.dump();
  EXPECT_TRUE(s["2"]["straggling"].get<bool>()) << s.dump();
  EXPECT_GT(s["2"]["score"].get<double>(), 1.5) << s.dump();
  EXPECT_FALSE(s["0"]["straggling"].get<bool>()) << s.dump();
  EXPECT_NE(log.str().find("straggler: rank 2 computes"), std::string::npos) << log.str();
}

// With rebalancing on, skewed scores end the run early with the rows the
// measured rates give (the launcher restarts it with them).
TEST(Stragglers, SkewedScoresEndARebalancingRun) {
  testing::ScratchDir dir;
  JobSpec o = sgd_job(3, 60);
  o.data.batch = 48;
  o.fault.inject_delay_rank = 2;
  o.fault.inject_delay_ms = 20;
  o.run.rebalance = true;
  o.checkpoint.save = dir.path() + "/ckpt";
  const JobResult got = train_quietly(o);
  ASSERT_TRUE(got.data_parallel && got.data_parallel->rebalance);
  const std::vector<int64_t>& shares = *got.data_parallel->rebalance;
  ASSERT_EQ(shares.size(), 3u);
  EXPECT_LT(shares[2], shares[0]);
  EXPECT_LT(got.run.steps, 60);
  EXPECT_TRUE(std::filesystem::exists(o.checkpoint.save + "/state.json"));
  JobSpec no_save = o;
  no_save.checkpoint.save.clear();
  testing::expect_train_error(no_save, "--rebalance restarts from the job's checkpoint");
}

TEST(Sync, BadOptionsAreNamed) {
  JobSpec o = sgd_job(2, 4);
  o.sync.mode = "partial-reduce";
  JobSpec cp = o;
  cp.strategy.context_parallel = 2;
  testing::expect_train_error(cp, "drop --cp 2");
  JobSpec pp = o;
  pp.strategy.pipeline_parallel = 2;  // one replica of two stages
  testing::expect_train_error(pp, "expected at least 2, got 1");
  JobSpec ps = o;
  ps.ps.mode = "bsp";
  ps.launch.ranks = 3;
  testing::expect_train_error(ps, "--sync partial-reduce and --ps bsp do not combine");
  JobSpec group = o;
  group.sync.min_group = 3;
  testing::expect_train_error(group, "--sync-group 3: expected 1..2");
  JobSpec one = o;
  one.launch.ranks = 1;
  testing::expect_train_error(one, "expected at least 2, got 1");
  JobSpec stray = sgd_job(2, 4);
  stray.sync.staleness = 3;
  testing::expect_train_error(stray, "--sync-staleness 3 needs --sync partial-reduce");
}

}  // namespace
}  // namespace px
