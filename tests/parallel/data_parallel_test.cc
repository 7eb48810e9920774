// Data parallelism against a single rank: N in-process ranks (1..8, odd
// counts included) give the single rank's per-step losses over 50 steps on
// the same global batch, for GPT (with dropout) and the CNN, with gradients
// reduced in buckets of several sizes.
#include <gtest/gtest.h>

#include <map>

#include "parallel/strategy_equivalence.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

constexpr int kSteps = 50;
constexpr double kTolerance = 1e-5;

TrainOptions gpt_job(const std::string& text) {
  TrainOptions o = testing::tiny_gpt(text);
  o.steps = kSteps;
  o.schedule.total = kSteps;
  o.batch = 8;
  return o;
}

TrainOptions cnn_job() {
  TrainOptions o = testing::tiny_cnn();
  o.steps = kSteps;
  o.schedule.total = kSteps;
  return o;
}

// One generated text for every GPT test of this binary (written once).
const std::string& shared_text() {
  static testing::ScratchDir dir;
  static const std::string text = testing::write_text(dir);
  return text;
}

// Single-rank losses, computed once per job.
[[maybe_unused]] const std::vector<double>& reference(const std::string& key, const TrainOptions& o) {
  static std::map<std::string, std::vector<double>> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, testing::train_losses(o)).first;
  return it->second;
}

class GptDataParallel : public ::testing::TestWithParam<int> {};

TEST_P(GptDataParallel, MatchesOneRank) {
  TrainOptions o = gpt_job(shared_text());
  const auto& single = reference("gpt", o);
  o.ranks = GetParam();
  testing::expect_same_losses(single, testing::train_losses(o), kTolerance,
                              fmt::format("gpt at {} ranks", o.ranks));
}
INSTANTIATE_TEST_SUITE_P(Ranks, GptDataParallel, ::testing::Values(2, 3, 4, 5, 8));

class CnnDataParallel : public ::testing::TestWithParam<int> {};

TEST_P(CnnDataParallel, MatchesOneRank) {
  TrainOptions o = cnn_job();
  const auto& single = reference("cnn", o);
  o.ranks = GetParam();
  testing::expect_same_losses(single, testing::train_losses(o), kTolerance,
                              fmt::format("cnn at {} ranks", o.ranks));
}
INSTANTIATE_TEST_SUITE_P(Ranks, CnnDataParallel, ::testing::Values(2, 3, 4, 7, 8));

// Bucket sizes (one bucket per tensor, small buckets, everything in one),
// each reduced during backward on the progress thread or after it.
class GptBuckets : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

TEST_P(GptBuckets, MatchOneRank) {
  TrainOptions o = gpt_job(shared_text());
  const auto& single = reference("gpt-buckets", o);
  o.ranks = 3;
  o.sync.bucket_bytes = std::get<0>(GetParam());
  o.sync.overlap = std::get<1>(GetParam());
  testing::expect_same_losses(single, testing::train_losses(o), kTolerance,
                              fmt::format("gpt at 3 ranks, buckets of {} bytes, overlap {}", o.sync.bucket_bytes,
                                          o.sync.overlap));
}
INSTANTIATE_TEST_SUITE_P(Sizes, GptBuckets,
                         ::testing::Combine(::testing::Values(0, 4096, int64_t{1} << 30), ::testing::Bool()));

TEST(DataParallel, CnnWithoutOverlapMatchesOneRank) {
  TrainOptions o = cnn_job();
  const auto& single = reference("cnn", o);
  o.ranks = 4;
  o.sync.overlap = false;
  testing::expect_same_losses(single, testing::train_losses(o), kTolerance, "cnn at 4 ranks without overlap");
}

// Accumulation inside each rank: 2 ranks x 2 micro-batches = 1 rank x 4.
TEST(DataParallel, AccumulationInsideRanksMatchesOneRank) {
  testing::ScratchDir dir;
  TrainOptions o = gpt_job(testing::write_text(dir));
  o.accumulation = 4;
  const std::vector<double> single = testing::train_losses(o);
  o.ranks = 2;
  o.accumulation = 2;
  testing::expect_same_losses(single, testing::train_losses(o), kTolerance, "gpt 2 ranks x 2 micro-batches");
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
  TrainOptions o = gpt_job(testing::write_text(dir));
  o.grad_clip = 0;
  o.eval_every = 20;  // updates are finished before evaluating mid-run
  const std::vector<double> single = testing::train_losses(o);
  o.ranks = GetParam();
  o.sync.p3_slice_bytes = 1024;
  testing::expect_same_losses(single, testing::train_losses(o), kTolerance,
                              fmt::format("gpt with P3 at {} ranks", o.ranks));
}

TEST_P(P3, CnnMatchesOneRank) {
  TrainOptions o = cnn_job();
  const auto& single = reference("cnn", o);
  o.ranks = GetParam();
  o.sync.p3_slice_bytes = 4096;
  testing::expect_same_losses(single, testing::train_losses(o), kTolerance,
                              fmt::format("cnn with P3 at {} ranks", o.ranks));
}
INSTANTIATE_TEST_SUITE_P(Ranks, P3, ::testing::Values(2, 3, 4));

TEST(P3Options, GradientClippingIsANamedError) {
  testing::ScratchDir dir;
  TrainOptions o = gpt_job(testing::write_text(dir));
  o.ranks = 2;
  o.sync.p3_slice_bytes = 1024;
  try {
    testing::train_losses(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--grad-clip"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace px

namespace px {
namespace {

// ZeRO-1: gradients reduce-scattered, each rank updating its shard of the
// parameters with its shard of the optimizer state, parameters all-gathered:
// the same update, so the same losses (with clipping: the norm is summed
// over the shards).
class Zero1 : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(Zero1, GptMatchesOneRank) {
  TrainOptions o = gpt_job(shared_text());
  const auto& single = reference("gpt-zero", o);
  o.ranks = std::get<0>(GetParam());
  o.sync.overlap = std::get<1>(GetParam());
  o.sync.zero_stage = 1;
  testing::expect_same_losses(single, testing::train_losses(o), kTolerance,
                              fmt::format("gpt with ZeRO-1 at {} ranks, overlap {}", o.ranks, o.sync.overlap));
}

TEST_P(Zero1, CnnMatchesOneRank) {
  TrainOptions o = cnn_job();
  const auto& single = reference("cnn", o);
  o.ranks = std::get<0>(GetParam());
  o.sync.overlap = std::get<1>(GetParam());
  o.sync.zero_stage = 1;
  testing::expect_same_losses(single, testing::train_losses(o), kTolerance,
                              fmt::format("cnn with ZeRO-1 at {} ranks, overlap {}", o.ranks, o.sync.overlap));
}
INSTANTIATE_TEST_SUITE_P(RanksOverlap, Zero1, ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool()));

// A checkpoint saved with sharded optimizer state (gathered) resumes without
// sharding at another rank count, and the other way round.
TEST(Zero1Checkpoint, ResumesAcrossRankCountsAndSharding) {
  testing::ScratchDir dir;
  TrainOptions o = gpt_job(testing::write_text(dir));
  const std::vector<double> single = testing::train_losses(o);
  TrainOptions first = o;
  first.ranks = 3;
  first.sync.zero_stage = 1;
  first.stop_after = 20;
  first.save = dir.file("zero");
  testing::train_losses(first);
  TrainOptions second = o;
  second.resume = first.save;
  second.ranks = 2;
  std::vector<double> tail = testing::train_losses(second);
  testing::expect_same_losses(std::vector<double>(single.begin() + 20, single.end()), tail, kTolerance,
                              "resumed at 2 ranks from ZeRO-1 at 3");
  TrainOptions third = o;
  third.resume = first.save;
  third.ranks = 4;
  third.sync.zero_stage = 1;
  testing::expect_same_losses(std::vector<double>(single.begin() + 20, single.end()), testing::train_losses(third),
                              kTolerance, "resumed with ZeRO-1 at 4 ranks");
}

}  // namespace
}  // namespace px
