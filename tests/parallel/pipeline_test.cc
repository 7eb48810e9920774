// Pipeline parallelism against a single rank: the GPT with dropout at
// pp = 2, 3 and 4 under every schedule (M = 1, 3 and 8; interleaved where M
// divides by P), with full and selective recomputation; pp=2 x dp=2 with
// ZeRO-1, pp=2 x dp=2 x tp=2 with sequence parallelism and ZeRO-1
// in-process; the CNN and the MLP at pp=2. Per-step losses over 50 steps
// within 1e-5 relative of one rank on the same global batch. Also the
// activation memory each schedule keeps against its formula, what
// recomputation saves, checkpoints across pipeline layouts, and the named
// errors.
#include <gtest/gtest.h>

#include <map>

#include "parallel/lower.h"
#include "parallel/strategy_equivalence.h"
#include "nn/model.h"
#include "testing/expect_train_error.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::kEquivalenceSteps;
using testing::kEquivalenceTolerance;

// 4 transformer blocks: 8 places to cut (after each block's attention and
// its MLP), enough for 4 ranks of 2 chunks.
JobSpec gpt_pipeline_job(int micro_batches) {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt.n_layer = 4;
  o.run.steps = kEquivalenceSteps;
  o.optimizer.schedule.total = kEquivalenceSteps;
  o.data.batch = 8;
  o.strategy.micro_batches = micro_batches;
  o.run.eval_every = 0;
  return o;
}

// One rank's losses for a job, keyed by what the pipeline tests vary.
const std::vector<double>& reference(const JobSpec& o) {
  return testing::reference_losses(
      fmt::format("pipeline {} micro-batches {} batch {} layers {}", o.model.kind, o.strategy.micro_batches, o.data.batch, o.model.gpt.n_layer), o);
}

JobSpec pipelined(JobSpec o, int stages, const std::string& schedule, int virtual_stages = 1) {
  o.launch.ranks = stages * o.launch.ranks;
  o.strategy.pipeline_parallel = stages;
  o.strategy.pipeline.schedule = parallel::pipeline_kind_from_name(schedule);
  o.strategy.pipeline.virtual_stages = virtual_stages;
  return o;
}

struct PipeCase {
  int stages;
  std::string schedule;
  int micro_batches;
  int virtual_stages = 1;
  parallel::Recompute recompute = parallel::Recompute::none;
};

std::string case_name(const ::testing::TestParamInfo<PipeCase>& info) {
  const PipeCase& c = info.param;
  std::string schedule = c.schedule;
  std::erase(schedule, '-');
  return fmt::format("pp{}_{}_m{}{}{}", c.stages, schedule, c.micro_batches,
                     c.virtual_stages > 1 ? fmt::format("_v{}", c.virtual_stages) : "",
                     c.recompute == parallel::Recompute::none ? "" : "_" + std::string(parallel::recompute_name(c.recompute)));
}

// gtest prints a case by its name, not its bytes.
void PrintTo(const PipeCase& c, std::ostream* os) { *os << case_name({c, 0}); }

class GptPipeline : public ::testing::TestWithParam<PipeCase> {};

TEST_P(GptPipeline, MatchesOneRank) {
  const PipeCase& c = GetParam();
  const JobSpec one = gpt_pipeline_job(c.micro_batches);
  JobSpec o = pipelined(one, c.stages, c.schedule, c.virtual_stages);
  o.strategy.recompute = c.recompute;
  testing::expect_same_losses(reference(one), testing::train_losses(o), kEquivalenceTolerance, case_name({c, 0}));
}

std::vector<PipeCase> every_schedule() {
  std::vector<PipeCase> cases;
  for (int stages : {2, 3, 4})
    for (const char* schedule : {"gpipe", "1f1b", "zb-h1"})
      for (int m : {1, 3, 8}) cases.push_back({stages, schedule, m});
  // Interleaved takes M a multiple of P.
  cases.push_back({2, "interleaved", 8, 2});
  cases.push_back({3, "interleaved", 3, 2});
  cases.push_back({4, "interleaved", 8, 2});
  // Recomputation under each schedule.
  using parallel::Recompute;
  for (int stages : {2, 3, 4}) cases.push_back({stages, "1f1b", 3, 1, Recompute::full});
  cases.push_back({2, "gpipe", 8, 1, Recompute::full});
  cases.push_back({3, "zb-h1", 8, 1, Recompute::full});
  cases.push_back({2, "interleaved", 4, 2, Recompute::full});
  cases.push_back({2, "1f1b", 8, 1, Recompute::selective});
  cases.push_back({4, "zb-h1", 3, 1, Recompute::selective});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Schedules, GptPipeline, ::testing::ValuesIn(every_schedule()), case_name);

TEST(GptRecompute, OneRankMatchesWithoutRecomputation) {
  const JobSpec one = gpt_pipeline_job(2);
  for (parallel::Recompute r : {parallel::Recompute::full, parallel::Recompute::selective}) {
    JobSpec o = one;
    o.strategy.recompute = r;
    testing::expect_same_losses(reference(one), testing::train_losses(o), kEquivalenceTolerance,
                                std::string("one rank recomputing ") + std::string(parallel::recompute_name(r)));
  }
}

TEST(GptPipeline, TwoStagesTimesTwoDataRanksWithZero1) {
  const JobSpec one = gpt_pipeline_job(2);
  JobSpec o = one;
  o.launch.ranks = 2;  // data ranks per stage
  o = pipelined(o, 2, "1f1b");
  o.strategy.zero_stage = 1;
  testing::expect_same_losses(reference(one), testing::train_losses(o), kEquivalenceTolerance, "pp=2 x dp=2, ZeRO-1");
}

// The 3-D hybrid: pipeline stages of data x tensor ranks, sequence
// parallelism on the tensor axis, ZeRO-1 over the data axis.
TEST(GptPipeline, ThreeDimensionalHybridMatchesOneRank) {
  const JobSpec one = gpt_pipeline_job(4);
  JobSpec o = one;
  o.launch.ranks = 4;  // dp=2 x tp=2 per stage
  o.strategy.tensor_parallel = 2;
  o.strategy.sequence_parallel = true;
  o.strategy.zero_stage = 1;
  o = pipelined(o, 2, "1f1b");
  testing::expect_same_losses(reference(one), testing::train_losses(o), kEquivalenceTolerance,
                              "pp=2 x dp=2 x tp=2 with sequence parallelism and ZeRO-1");
}

// A classifier at pp=2 against one rank, with M micro-batches.
void expect_classifier_matches(JobSpec one, int micro_batches, const std::string& schedule) {
  one.run.steps = kEquivalenceSteps;
  one.optimizer.schedule.total = kEquivalenceSteps;
  one.strategy.micro_batches = micro_batches;
  one.run.eval_every = 0;
  testing::expect_same_losses(reference(one), testing::train_losses(pipelined(one, 2, schedule)), kEquivalenceTolerance,
                              one.model.kind + " at pp=2, " + schedule);
}

TEST(CnnPipeline, TwoStagesMatchOneRank) { expect_classifier_matches(testing::tiny_cnn(), 4, "1f1b"); }

TEST(MlpPipeline, TwoStagesMatchOneRank) { expect_classifier_matches(testing::tiny_mlp(), 2, "gpipe"); }

// GPipe keeps all M micro-batches' activations, 1F1B at most P on the first
// stage: the measured peaks keep the formula's ratio (M / P = 4 here).
TEST(PipelineMemory, GpipeAndOneFOneBKeepWhatTheirFormulasSay) {
  std::map<std::string, JobResult> runs;
  for (const char* schedule : {"gpipe", "1f1b"}) {
    JobSpec o = pipelined(gpt_pipeline_job(8), 2, schedule);
    o.run.steps = 2;
    std::ostringstream log;
    runs[schedule] = train(o, log);
    ASSERT_EQ(runs[schedule].data_parallel->pipeline_stages.size(), 2u) << log.str();
    const StageMeasurement& first = runs[schedule].data_parallel->pipeline_stages[0];
    const double formula = (std::string(schedule) == "gpipe" ? 8.0 : 2.0) * double(first.micro_batch_stash_bytes);
    EXPECT_NEAR(double(first.activation_peak_bytes) / formula, 1.0, 0.15) << schedule << "\n" << log.str();
  }
  const double ratio = double(runs["gpipe"].data_parallel->pipeline_stages[0].activation_peak_bytes) /
                       double(runs["1f1b"].data_parallel->pipeline_stages[0].activation_peak_bytes);
  EXPECT_NEAR(ratio / 4.0, 1.0, 0.15);
}

// Full recomputation keeps each block's input only: the forward
// activations a step holds at its peak shrink severalfold.
TEST(PipelineMemory, FullRecomputationKeepsFarFewerActivations) {
  JobSpec o = gpt_pipeline_job(1);
  o.model.gpt.block = 64;
  o.run.steps = 1;
  std::map<parallel::Recompute, int64_t> peak;
  for (parallel::Recompute r : {parallel::Recompute::none, parallel::Recompute::selective, parallel::Recompute::full}) {
    o.strategy.recompute = r;
    std::ostringstream log;
    peak[r] = train(o, log).data_parallel->activation_peak_bytes;
  }
  EXPECT_LT(peak[parallel::Recompute::selective], peak[parallel::Recompute::none]);
  EXPECT_GE(double(peak[parallel::Recompute::none]) / double(peak[parallel::Recompute::full]), 3.0)
      << "none " << peak[parallel::Recompute::none] << " B, full " << peak[parallel::Recompute::full] << " B";
}

// A checkpoint saved by pipeline stages resumes on one rank and under data
// parallelism, and one saved by one rank resumes on stages; each segment
// matches an uninterrupted run.
TEST(PipelineCheckpoint, ResumesAcrossPipelineLayouts) {
  struct Layout {
    const char* name;
    int stages, data_ranks;
  };
  const std::vector<Layout> chain{{"pp=2", 2, 1}, {"dp=2", 1, 2}, {"pp=3 x dp=1", 3, 1}, {"1 rank", 1, 1}};
  constexpr int kSegment = 10;
  JobSpec base = gpt_pipeline_job(2);
  base.run.steps = kSegment * static_cast<int64_t>(chain.size());
  base.optimizer.schedule.total = base.run.steps;
  std::vector<testing::ResumeLink> links;
  for (const Layout& l : chain) {
    JobSpec o = base;
    o.launch.ranks = l.data_ranks;
    links.push_back({l.name, l.stages > 1 ? pipelined(o, l.stages, "1f1b") : o});
  }
  testing::expect_resumed_segments_match(links, kSegment, kEquivalenceTolerance);
}

TEST(PipelineErrors, AnInterleavedMicroBatchCountItCannotTakeNamesTheNearest) {
  testing::expect_train_error(pipelined(gpt_pipeline_job(3), 2, "interleaved", 2), "micro-batches");
}

TEST(PipelineErrors, StageCutsMustNameOneLayerPerCut) {
  JobSpec o = pipelined(gpt_pipeline_job(2), 3, "1f1b");
  o.strategy.pipeline.stage_cuts = {"h.2"};
  testing::expect_train_error(o, "need 2 cuts");
  o.strategy.pipeline.stage_cuts = {"h.1", "h.9"};
  testing::expect_train_error(o, "no layer 'h.9'");
}

TEST(PipelineErrors, ZeroThreeDoesNotCombineWithStages) {
  JobSpec o = gpt_pipeline_job(2);
  o.launch.ranks = 2;
  o = pipelined(o, 2, "1f1b");
  o.strategy.zero_stage = 3;
  testing::expect_train_error(o, "ZeRO-3 does not combine with pipeline stages");
}

TEST(PipelineErrors, MoreStagesThanPlacesToCutIsANamedError) {
  JobSpec o = gpt_pipeline_job(8);
  o.model.gpt.n_layer = 1;
  o.model.gpt.dropout = 0;  // 6 places: around the embedding, the attention, the MLP and the final norm
  testing::expect_train_error(pipelined(o, 8, "1f1b"), "places to cut");
}

}  // namespace
}  // namespace px
