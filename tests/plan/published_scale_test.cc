// The GPU presets against published end-to-end runs: every run of
// bench/published_runs.json (Narayanan et al. 2021, Korthikanti et al.
// 2022: GPT models of 1.7B to 1T parameters on 8 to 3072 A100s) replayed
// on the dgx-a100 preset as `parallax simulate` replays it (bf16 compute,
// one sequence a micro-batch, 1F1B), its step time compared with the
// PUBLISHED one. The presets' efficiency constants name their sources in
// src/plan/presets.cc and are not fitted to these runs.
//
// Tolerances (docs/planner.md, "Published scale"): each run within 30%,
// the median |error| within 20%. The target is tighter (median 10%, worst
// 20%) and not met yet: the median |error| is 11.8%, the worst 19.9%
// (gpt3-175b-1024; docs/planner.md gives the table). A preset
// back at datasheet peak predicts these runs 1.5-1.9x fast (-35..-47%)
// and fails both; so does a model that loses the pipeline bubble or the
// tensor-parallel collectives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "nn/gpt.h"
#include "nn/model.h"
#include "parallel/compose.h"
#include "plan/simulate.h"

namespace px::plan {
namespace {

constexpr double kSequence = 2048, kVocab = 51200;
constexpr double kRunTolerance = 0.30, kMedianTolerance = 0.20;

struct PublishedRun {
  std::string id;
  int64_t layers = 0, heads = 0, embd = 0, batch = 0;
  int gpus = 0, tp = 1, pp = 1;
  bool selective = false, sequence_parallel = false;
  bool overlap = true;  // gradient reduction overlapped with backward
  double published_seconds = 0;  // the source's iteration time, or its teraFLOP/s turned into one
};

// Narayanan et al.'s count of an iteration's FLOPs with full recomputation.
double megatron_flops(const PublishedRun& r) {
  const double B = static_cast<double>(r.batch), l = static_cast<double>(r.layers), h = static_cast<double>(r.embd);
  return 96 * B * kSequence * l * h * h * (1 + kSequence / (6 * h) + kVocab / (16 * l * h));
}

std::vector<PublishedRun> published_runs() {
  std::ifstream in(PX_PUBLISHED_RUNS);
  EXPECT_TRUE(in) << "cannot read " << PX_PUBLISHED_RUNS;
  const nlohmann::json json = nlohmann::json::parse(in);
  std::vector<PublishedRun> runs;
  for (const nlohmann::json& j : json.at("runs")) {
    PublishedRun r{.id = j.at("id"), .layers = j.at("layers"), .heads = j.at("heads"), .embd = j.at("embd"),
                   .batch = j.at("batch"), .gpus = j.at("gpus"), .tp = j.at("tp"), .pp = j.at("pp"),
                   .selective = j.at("recompute") == "selective",
                   .sequence_parallel = j.value("sequence_parallel", false), .overlap = j.value("overlap", true)};
    const nlohmann::json& p = j.at("published");
    r.published_seconds = p.contains("iteration_seconds")
                              ? p.at("iteration_seconds").get<double>()
                              : megatron_flops(r) / (p.at("tflops_per_gpu").get<double>() * 1e12 * r.gpus);
    runs.push_back(r);
  }
  return runs;
}

// One sequence a micro-batch: a data-parallel rank's share of the batch.
int64_t micro_batches(const PublishedRun& r) { return r.batch / (r.gpus / (r.tp * r.pp)); }

double predicted_seconds(const PublishedRun& r, const std::string& preset) {
  const nn::GptConfig config{.vocab = static_cast<int64_t>(kVocab), .block = static_cast<int64_t>(kSequence),
                             .n_layer = r.layers, .n_head = r.heads, .n_embd = r.embd};
  const nn::Model model = nn::build_gpt(config, r.batch, config.block, true);
  const parallel::StrategyRequest request{
      .tensor_parallel = r.tp, .sequence_parallel = r.sequence_parallel, .pipeline_parallel = r.pp,
      .recompute = r.selective ? parallel::Recompute::selective : parallel::Recompute::full,
      .micro_batches = static_cast<int>(micro_batches(r)),
      .precision = Precision::bf16};
  const parallel::Strategy s =
      parallel::compose(request, {.graph = &model.graph, .batch_inputs = batch_input_names(model), .ranks = r.gpus});
  const std::vector<parallel::Program> programs =
      lower_representatives({.forward = &model.graph, .loss = model.loss}, s);
  const ClusterSpec cluster = cluster_named(fmt::format("{}:{}", preset, (r.gpus + 7) / 8));
  const RooflineEstimator estimator(cluster);
  return simulate({.programs = &programs, .cluster = &cluster, .estimator = &estimator,
                   .execution = {.overlap = r.overlap}})
      .step_seconds;
}

// Every run and the median in one test: the median needs every run's
// prediction, and a replay is the cost (the 530B-1T runs replay 9800-32768
// stage-micro-batches, tens of seconds each), so each run is replayed once
// and checked by name. CI runs it in its Release + UBSan stage (`long`);
// under ASan the largest took minutes.
TEST(PublishedScale, EveryRunAndTheMedianAreWithinTheirTolerances) {
  const std::vector<PublishedRun> runs = published_runs();
  ASSERT_EQ(runs.size(), 19u) << "bench/published_runs.json changed: update the count (and docs/planner.md's table)";
  std::vector<double> errors;
  for (const PublishedRun& r : runs) {
    const double predicted = predicted_seconds(r, "dgx-a100");
    const double error = std::abs(predicted / r.published_seconds - 1);
    EXPECT_LE(error, kRunTolerance) << r.id << ": predicted " << predicted << " s, published " << r.published_seconds
                                    << " s";
    errors.push_back(error);
  }
  std::sort(errors.begin(), errors.end());
  const size_t n = errors.size();
  const double median = n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
  EXPECT_LE(median, kMedianTolerance);
  std::cout << "published runs: median |error| " << 100 * median << "%, worst " << 100 * errors.back() << "%\n";
}

}  // namespace
}  // namespace px::plan
