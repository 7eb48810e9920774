// Data parallelism against a single rank: N in-process ranks (2..8, odd
// counts included) give the single rank's per-step losses over 50 steps on
// the same global batch, for GPT (with dropout) and the CNN, with gradients
// reduced in buckets of several sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "parallel/memory_ledger.h"
#include "parallel/strategy_equivalence.h"
#include "runtime/tasks/task.h"
#include "runtime/launch/launch.h"
#include "testing/expect_train_error.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::kEquivalenceSteps;
using testing::kEquivalenceTolerance;

JobSpec gpt_job(const std::string& text) {
  JobSpec o = testing::tiny_gpt(text);
  o.run.steps = kEquivalenceSteps;
  o.optimizer.schedule.total = kEquivalenceSteps;
  o.data.batch = 8;
  return o;
}

JobSpec cnn_job() {
  JobSpec o = testing::tiny_cnn();
  o.run.steps = kEquivalenceSteps;
  o.optimizer.schedule.total = kEquivalenceSteps;
  return o;
}

// --allreduce names the gradients' allreduce algorithm; a run's other
// collectives take it where they implement it and choose their own
// otherwise (each of these three failed with "algorithm ... does not
// implement this collective").
TEST(AllreduceFlag, TheRunsOtherCollectivesChooseTheirOwnWhereItDoesNotApply) {
  struct Case {
    const char* what;
    comm::Algorithm algorithm;
    std::function<void(JobSpec&)> strategy;
  };
  const std::vector<Case> cases{
      {"context parallelism by all-to-all, ring", comm::Algorithm::ring,
       [](JobSpec& o) {
         o.strategy.context_parallel = 2;
         o.strategy.context_method = parallel::ContextMethod::all_to_all;
       }},
      {"ZeRO-2's reduce-scatters, tree", comm::Algorithm::tree, [](JobSpec& o) { o.strategy.zero_stage = 2; }},
      {"a pipeline's broadcast of its stages' parameters, ring", comm::Algorithm::ring,
       [](JobSpec& o) { o.strategy.pipeline_parallel = 2; }},
  };
  for (const Case& c : cases) {
    JobSpec o = gpt_job(testing::shared_text());
    o.run.steps = o.optimizer.schedule.total = 2;
    o.launch.ranks = 2;
    o.strategy.collective.algorithm = c.algorithm;
    c.strategy(o);
    std::ostringstream log;
    EXPECT_NO_THROW(train(o, log)) << c.what;
  }
}

class GptDataParallel : public ::testing::TestWithParam<int> {};

TEST_P(GptDataParallel, MatchesOneRank) {
  JobSpec o = gpt_job(testing::shared_text());
  const auto& single = testing::reference_losses("gpt", o);
  o.launch.ranks = GetParam();
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                              fmt::format("gpt at {} ranks", o.launch.ranks));
}
INSTANTIATE_TEST_SUITE_P(Ranks, GptDataParallel, ::testing::Values(2, 3, 4, 5, 6, 7, 8));

class CnnDataParallel : public ::testing::TestWithParam<int> {};

TEST_P(CnnDataParallel, MatchesOneRank) {
  JobSpec o = cnn_job();
  const auto& single = testing::reference_losses("cnn", o);
  o.launch.ranks = GetParam();
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                              fmt::format("cnn at {} ranks", o.launch.ranks));
}
INSTANTIATE_TEST_SUITE_P(Ranks, CnnDataParallel, ::testing::Values(2, 3, 4, 5, 6, 7, 8));

// Rows split in proportion to --row-shares (ranks of different speeds) give
// the single rank's losses: the loss is scaled by the global batch, so each
// rank's gradient is its rows' summand however many it holds. Shares that
// leave ranks 1-7 rows of 8, with micro-batches and ZeRO-1 too.
TEST(RowShares, UnevenSharesMatchOneRank) {
  struct Case {
    const char* model;
    int ranks;
    std::vector<int64_t> shares;
    int micro_batches;
    int zero;
  };
  for (const Case& c : {Case{"gpt", 4, {4, 4, 4, 1}, 1, 0}, Case{"gpt", 3, {1, 2, 5}, 2, 0},
                        Case{"cnn", 3, {3, 1, 1}, 1, 1}}) {
    JobSpec o = std::string(c.model) == "gpt" ? gpt_job(testing::shared_text()) : cnn_job();
    const auto& single = testing::reference_losses(c.model, o);
    o.launch.ranks = c.ranks;
    o.strategy.row_shares = c.shares;
    o.strategy.micro_batches = c.micro_batches;
    o.strategy.zero_stage = c.zero;
    testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                                fmt::format("{} at {} ranks, shares {}, {} micro-batches, ZeRO-{}", c.model, c.ranks,
                                            fmt::join(c.shares, ","), c.micro_batches, c.zero));
  }
}

TEST(RowShares, SharesThatDoNotFitTheRanksOrTheBatchAreNamedErrors) {
  JobSpec o = gpt_job(testing::shared_text());
  o.run.steps = o.optimizer.schedule.total = 1;
  o.launch.ranks = 2;
  o.strategy.row_shares = {1, 1, 1};
  testing::expect_train_error(o, "--row-shares: 3 row shares for 2 data-parallel ranks");
  o.strategy.row_shares = {1, 100};  // rows [0, 8·1/101) = none
  testing::expect_train_error(o, "--row-shares gives data rank 0 no rows of a 8-row batch");
}

// Bucket sizes (one bucket per tensor, small buckets, everything in one),
// each reduced during backward on the progress thread or after it.
class GptBuckets : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

TEST_P(GptBuckets, MatchOneRank) {
  JobSpec o = gpt_job(testing::shared_text());
  const auto& single = testing::reference_losses("gpt-buckets", o);
  o.launch.ranks = 3;
  o.strategy.bucket_bytes = std::get<0>(GetParam());
  o.run.overlap = std::get<1>(GetParam());
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                              fmt::format("gpt at 3 ranks, buckets of {} bytes, overlap {}", o.strategy.bucket_bytes,
                                          o.run.overlap));
}
INSTANTIATE_TEST_SUITE_P(Sizes, GptBuckets,
                         ::testing::Combine(::testing::Values(0, 4096, int64_t{1} << 30), ::testing::Bool()));

TEST(DataParallel, CnnWithoutOverlapMatchesOneRank) {
  JobSpec o = cnn_job();
  const auto& single = testing::reference_losses("cnn", o);
  o.launch.ranks = 4;
  o.run.overlap = false;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance, "cnn at 4 ranks without overlap");
}

// The bytes a step reports on the data axis are what the gradient ring
// allreduce sends, overlapped on the progress engine or inline: each rank
// 2 (p-1)/p of the gradient, plus the loss's and the norm's one float and,
// on the engine, its few bytes a job of agreement on what runs next.
TEST(DataParallel, ReportsTheGradientRingsBytesOnTheDataAxis) {
  for (bool overlap : {true, false}) {
    JobSpec o = gpt_job(testing::shared_text());
    o.run.steps = o.optimizer.schedule.total = 3;
    o.launch.ranks = 2;
    o.run.overlap = overlap;
    o.strategy.collective.algorithm = comm::Algorithm::ring;
    std::ostringstream log;
    const JobResult result = train(o, log);
    const int64_t parameters = make_task(o.model, o.data, o.run.seed)->build(o.data.batch, true).graph.param_count();
    const double gradient_bytes = 2 * 0.5 * 4.0 * static_cast<double>(parameters);
    const double reported = static_cast<double>(result.data_parallel->bytes_per_axis.at("dp"));
    EXPECT_GE(reported, gradient_bytes) << (overlap ? "overlapped" : "inline");
    EXPECT_LE(reported, gradient_bytes * 1.01) << (overlap ? "overlapped" : "inline");
  }
}

// Accumulation inside each rank: 2 ranks x 2 micro-batches = 1 rank x 4.
TEST(DataParallel, AccumulationInsideRanksMatchesOneRank) {
  testing::ScratchDir dir;
  JobSpec o = gpt_job(testing::write_text(dir));
  o.strategy.micro_batches = 4;
  const std::vector<double> single = testing::train_losses(o);
  o.launch.ranks = 2;
  o.strategy.micro_batches = 2;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance, "gpt 2 ranks x 2 micro-batches");
}

}  // namespace
}  // namespace px

namespace px {
namespace {

// P3: per-weight jobs in small slices by forward priority, each weight
// updated just before the next forward reads it — the same update, so the
// same losses (clipping off: it needs every gradient before any update).
class P3 : public ::testing::TestWithParam<int> {};

TEST_P(P3, GptMatchesOneRank) {
  testing::ScratchDir dir;
  JobSpec o = gpt_job(testing::write_text(dir));
  o.optimizer.grad_clip = 0;
  o.run.eval_every = 20;  // updates are finished before evaluating mid-run
  const std::vector<double> single = testing::train_losses(o);
  o.launch.ranks = GetParam();
  o.strategy.p3_slice_bytes = 1024;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                              fmt::format("gpt with P3 at {} ranks", o.launch.ranks));
}

TEST_P(P3, CnnMatchesOneRank) {
  JobSpec o = cnn_job();
  const auto& single = testing::reference_losses("cnn", o);
  o.launch.ranks = GetParam();
  o.strategy.p3_slice_bytes = 4096;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance,
                              fmt::format("cnn with P3 at {} ranks", o.launch.ranks));
}
INSTANTIATE_TEST_SUITE_P(Ranks, P3, ::testing::Values(2, 3, 4));

TEST(P3Options, GradientClippingIsANamedError) {
  testing::ScratchDir dir;
  JobSpec o = gpt_job(testing::write_text(dir));
  o.launch.ranks = 2;
  o.strategy.p3_slice_bytes = 1024;
  testing::expect_train_error(o, "--grad-clip");
}

}  // namespace
}  // namespace px

namespace px {
namespace {

// ZeRO-1, -2 and -3: gradients reduce-scattered, each rank updating its
// shard of the parameters with its shard of the optimizer state, parameters
// all-gathered: the same update, so the same losses (with clipping: the norm
// is summed over the shards). ZeRO-2 reduces bucket by bucket from buffers
// freed after their reduce-scatter; ZeRO-3 also stores the parameters as
// shards and gathers each bucket before its first use in forward and again
// in backward (dropout: the same masks). Parameters: (stage, ranks, overlap).
class Zero : public ::testing::TestWithParam<std::tuple<int, int, bool>> {
 protected:
  JobSpec sharded(JobSpec o) const {
    o.strategy.zero_stage = std::get<0>(GetParam());
    o.launch.ranks = std::get<1>(GetParam());
    o.run.overlap = std::get<2>(GetParam());
    return o;
  }
  std::string what(const std::string& model, const JobSpec& o) const {
    return fmt::format("{} with ZeRO-{} at {} ranks, overlap {}", model, o.strategy.zero_stage, o.launch.ranks, o.run.overlap);
  }
};

TEST_P(Zero, GptMatchesOneRank) {
  JobSpec o = gpt_job(testing::shared_text());
  const auto& single = testing::reference_losses("gpt-zero", o);
  o = sharded(o);
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance, what("gpt", o));
}

TEST_P(Zero, CnnMatchesOneRank) {
  JobSpec o = cnn_job();
  const auto& single = testing::reference_losses("cnn", o);
  o = sharded(o);
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance, what("cnn", o));
}
INSTANTIATE_TEST_SUITE_P(StagesRanksOverlap, Zero,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(2, 3, 4), ::testing::Bool()));

// ZeRO-2 and -3 with micro-batches: every micro-batch's buckets are
// reduce-scattered and added into the shard (2 ranks x 2 micro-batches = 1
// rank x 4; ZeRO-3 gathers the parameters again for each micro-batch), with
// one-bucket-per-tensor and a single bucket buffer (backward waits for every
// reduction before the next bucket) as the tightest memory setting.
TEST(ZeroAccumulation, MatchesOneRank) {
  JobSpec o = gpt_job(testing::shared_text());
  o.strategy.micro_batches = 4;
  const std::vector<double> single = testing::train_losses(o);
  for (int stage : {2, 3}) {
    JobSpec z = o;
    z.launch.ranks = 2;
    z.strategy.micro_batches = 2;
    z.strategy.zero_stage = stage;
    testing::expect_same_losses(single, testing::train_losses(z), kEquivalenceTolerance,
                                fmt::format("gpt ZeRO-{}, 2 ranks x 2 micro-batches", stage));
    z.strategy.bucket_bytes = 0;
    z.strategy.bucket_buffers = 1;
    testing::expect_same_losses(single, testing::train_losses(z), kEquivalenceTolerance,
                                fmt::format("gpt ZeRO-{}, 2 ranks x 2 micro-batches, one buffer of one tensor", stage));
  }
}

// ZeRO-2 overlaps: backward goes on while a bucket it filled is
// reduce-scattered on the progress engine (the bucket's buffer is freed when
// that reduction finishes, not waited for). Over a slow link each
// reduce-scatter outlasts a layer's backward, so a step whose backward
// waited for every bucket right after submitting it would start no
// compute while one is in flight; here some compute must.
TEST(ZeroOverlap, BackwardComputesWhileABucketIsReduceScattered) {
  testing::ScratchDir dir;
  JobSpec o = gpt_job(testing::shared_text());
  o.model.gpt.n_embd = 64;  // a backward of ~15 ms, in 7 buckets a step
  o.model.gpt.block = 64;
  o.run.steps = 4;
  o.launch.ranks = 2;
  o.strategy.zero_stage = 2;
  o.strategy.bucket_bytes = 64 << 10;
  o.launch.link_gbps = 0.5;  // ~0.8 ms per bucket's reduce-scatter
  o.run.trace = dir.file("trace.json");
  std::ostringstream log;
  train(o, log);
  const nlohmann::json trace = nlohmann::json::parse(testing::read_file(o.run.trace));
  std::vector<std::pair<double, double>> reductions;  // rank 0's gradient reduce-scatters: [start, end)
  std::vector<double> computes;                        // rank 0's compute starts
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.value("ph", "") != "X" || e.at("pid") != 0) continue;
    const double start = e.at("ts").get<double>();
    if (e.at("tid") == 0) computes.push_back(start);
    else if (e.at("name").get<std::string>().find("grad bucket") != std::string::npos)
      reductions.emplace_back(start, start + e.at("dur").get<double>());
  }
  ASSERT_GE(reductions.size(), 6u) << log.str();
  int overlapped = 0;
  for (const std::pair<double, double>& r : reductions)
    overlapped += std::any_of(computes.begin(), computes.end(), [&](double t) { return t > r.first && t < r.second; });
  EXPECT_GE(overlapped, 2) << "of " << reductions.size() << " gradient reduce-scatters, " << overlapped
                           << " had backward compute start while they ran";
}

// Memory per rank follows runtime/train/memory_report.h: parameters 4Ψ, then
// 4Ψ/p at ZeRO-3; gradients 4Ψ, 4Ψ + 4Ψ/p, 4Ψ/p; optimizer state 4KΨ, then
// 4KΨ/p — up to one element per bucket from the block split. ZeRO-2/3's
// bucket buffers stay within bucket_buffers buckets; ZeRO-3's gathered
// parameters within the bucket in use, the one prefetched and the one
// being freed, never the whole model.
TEST(ZeroMemory, PerRankBytesMatchTheFormula) {
  JobSpec o = gpt_job(testing::shared_text());
  o.run.steps = 2;
  o.launch.ranks = 4;
  o.strategy.bucket_bytes = 16 << 10;
  int64_t parameters = 0;
  for (int stage : {0, 1, 2, 3}) {
    o.strategy.zero_stage = stage;
    // ZeRO-3 with smaller buckets: the tied embedding (16 KiB) is over a
    // third of this model, so three 16 KiB buckets would be all of it.
    if (stage == 3) o.strategy.bucket_bytes = 4 << 10;
    std::ostringstream log;
    const JobResult result = train(o, log);
    if (parameters == 0) parameters = static_cast<int64_t>(result.data_parallel->memory.parameters / 4);
    const parallel::StateBytes expected = parallel::state_bytes(static_cast<double>(parameters), stage, o.launch.ranks, 2);  // AdamW: 2 slots
    // Buckets of >= B bytes: at most 4Ψ/B + tensors of them, one element of slack each.
    const double slack = 4.0 * 2 * (4.0 * static_cast<double>(parameters) / static_cast<double>(o.strategy.bucket_bytes) + 64);
    EXPECT_NEAR(result.data_parallel->memory.parameters, expected.parameters, stage == 3 ? slack : 0) << "ZeRO-" << stage;
    EXPECT_NEAR(result.data_parallel->memory.gradients, expected.gradients, slack) << "ZeRO-" << stage;
    EXPECT_NEAR(result.data_parallel->memory.optimizer_state, expected.optimizer_state, slack) << "ZeRO-" << stage;
    EXPECT_NE(log.str().find("memory per rank (ZeRO-" + std::to_string(stage)), std::string::npos) << log.str();
    // The largest bucket is the largest tensor (the tied embedding) or about the bucket size.
    const double largest_bucket = std::max<double>(4.0 * 256 * 16, static_cast<double>(o.strategy.bucket_bytes));
    if (stage >= 2) {
      EXPECT_GT(result.data_parallel->gradient_buffer_peak_bytes, 0);
      EXPECT_LE(result.data_parallel->gradient_buffer_peak_bytes, o.strategy.bucket_buffers * largest_bucket);
      EXPECT_LT(result.data_parallel->memory.gradients, parallel::state_bytes(static_cast<double>(parameters), 1, o.launch.ranks, 2).gradients / 4);
    } else {
      EXPECT_EQ(result.data_parallel->gradient_buffer_peak_bytes, 0);
    }
    if (stage == 3) {
      EXPECT_GT(result.data_parallel->gathered_parameter_peak_bytes, 0);
      EXPECT_LE(result.data_parallel->gathered_parameter_peak_bytes, 3 * largest_bucket);
      EXPECT_LT(result.data_parallel->gathered_parameter_peak_bytes, 4.0 * parameters);
    } else {
      EXPECT_EQ(result.data_parallel->gathered_parameter_peak_bytes, 0);
    }
  }
  EXPECT_GT(parameters, 0);
}

// A checkpoint saved with sharded optimizer state (gathered) resumes without
// sharding at another rank count, and the other way round, across stages.
TEST(ZeroCheckpoint, ResumesAcrossRankCountsAndSharding) {
  testing::ScratchDir dir;
  JobSpec o = gpt_job(testing::write_text(dir));
  const std::vector<double> single = testing::train_losses(o);
  const std::vector<double> single_tail(single.begin() + 20, single.end());
  // Trains the first 20 steps at (ranks, stage) and saves them to `name`.
  auto save = [&](int ranks, int stage, const std::string& name) {
    JobSpec first = o;
    first.launch.ranks = ranks;
    first.strategy.zero_stage = stage;
    first.run.stop_after = 20;
    first.checkpoint.save = dir.file(name);
    testing::train_losses(first);
    return first.checkpoint.save;
  };
  // Resumes `checkpoint` at (ranks, stage): the single rank's last 30 losses.
  auto expect_resumed = [&](const std::string& checkpoint, int ranks, int stage, const std::string& what) {
    JobSpec resumed = o;
    resumed.checkpoint.resume = checkpoint;
    resumed.launch.ranks = ranks;
    resumed.strategy.zero_stage = stage;
    testing::expect_same_losses(single_tail, testing::train_losses(resumed), kEquivalenceTolerance, what);
  };
  const std::string zero1 = save(3, 1, "zero");
  expect_resumed(zero1, 2, 0, "resumed at 2 ranks from ZeRO-1 at 3");
  expect_resumed(zero1, 4, 2, "resumed with ZeRO-2 at 4 ranks from ZeRO-1 at 3");
  // Saved with parameters stored sharded too (ZeRO-3 gathers them into the
  // checkpoint), resumed with ZeRO-3 at another rank count and at one rank.
  const std::string zero3 = save(2, 3, "zero3");
  expect_resumed(zero3, 3, 3, "resumed with ZeRO-3 at 3 ranks from ZeRO-3 at 2");
  expect_resumed(zero3, 1, 0, "resumed at one rank from ZeRO-3 at 2");
}

TEST(ZeroOptions, UnknownStageIsANamedError) {
  JobSpec o = gpt_job(testing::shared_text());
  o.launch.ranks = 2;
  o.strategy.zero_stage = 4;
  testing::expect_train_error(o, "ZeRO stage 4");
}

}  // namespace
}  // namespace px
