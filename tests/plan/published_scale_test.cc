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
// 20%) and not met: with the model changed by outside evidence (issue 50:
// standard attention as these runs ran it, collectives across nodes on a
// NIC per rank of a node) the median |error| is 13.2%, the worst 27.3%
// (megatron-18.4b), every run predicted slow; docs/planner.md gives the
// table. Each run is replayed with its attention kernel (the file's
// attention_kernel, simulate's --attention-kernel). A preset
// back at datasheet peak predicts these runs 1.5-1.9x fast (-35..-47%)
// and fails both; so does a model that loses the pipeline bubble or the
// tensor-parallel collectives. Each run's replay is also the score
// bench/published_runs.json keeps for it (`scored`), which `parallax
// simulate` shows beside a prediction of similar shape: a change to the
// model that moves a replay fails here until the scores are written again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "nn/gpt.h"
#include "nn/model.h"
#include "parallel/compose.h"
#include "plan/published_checks.h"
#include "plan/simulate.h"

namespace px::plan {
namespace {

constexpr double kRunTolerance = 0.30, kMedianTolerance = 0.20;

std::string read_runs() {
  std::ifstream in(PX_PUBLISHED_RUNS);
  EXPECT_TRUE(in) << "cannot read " << PX_PUBLISHED_RUNS;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One sequence a micro-batch: a data-parallel rank's share of the batch.
int64_t micro_batches(const CheckedRun& r) { return r.batch / (r.gpus / (r.tp * r.pp)); }

double predicted_seconds(const CheckedRun& r) {
  const nn::GptConfig config{.vocab = r.vocab, .block = r.sequence, .n_layer = r.layers, .n_head = r.heads,
                             .n_embd = r.embd};
  const nn::Model model = nn::build_gpt(config, r.batch, config.block, true);
  const parallel::StrategyRequest request{
      .tensor_parallel = r.tp, .sequence_parallel = r.sequence_parallel, .pipeline_parallel = r.pp,
      .recompute = parallel::recompute_from_name(r.recompute),
      .micro_batches = static_cast<int>(micro_batches(r)),
      .precision = Precision::bf16};
  const parallel::Strategy s =
      parallel::compose(request, {.graph = &model.graph, .batch_inputs = batch_input_names(model), .ranks = r.gpus});
  const std::vector<parallel::Program> programs =
      lower_representatives({.forward = &model.graph, .loss = model.loss}, s);
  const ClusterSpec cluster =
      with_attention_kernel(cluster_named(fmt::format("{}:{}", r.preset, (r.gpus + 7) / 8)), r.attention_kernel);
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
  const std::string text = read_runs();
  const std::vector<CheckedRun> runs = checked_runs(text);
  ASSERT_EQ(runs.size(), 19u) << "bench/published_runs.json changed: update the count (and docs/planner.md's table)";
  // The scores `parallax simulate` shows beside a prediction (plan/published_checks.h) are
  // these replays': PX_UPDATE_GOLDEN=1 writes them into the file after a deliberate change.
  const char* update = std::getenv("PX_UPDATE_GOLDEN");
  const bool write = update != nullptr && std::string(update) == "1";
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(text);
  std::vector<double> errors;
  for (size_t i = 0; i < runs.size(); ++i) {
    const CheckedRun& r = runs[i];
    const double predicted = predicted_seconds(r);
    const double error = std::abs(predicted / r.published_seconds - 1);
    EXPECT_LE(error, kRunTolerance) << r.id << ": predicted " << predicted << " s, published " << r.published_seconds
                                    << " s";
    if (write) json["runs"][i]["scored"] = {{"predicted_seconds", std::round(predicted * 1e4) / 1e4}};
    else
      EXPECT_NEAR(r.predicted_seconds / predicted, 1.0, 1e-3)
          << r.id << ": the score bench/published_runs.json keeps (" << r.predicted_seconds
          << " s) is not this replay's (" << predicted << " s): regenerate with PX_UPDATE_GOLDEN=1 and read the diff";
    errors.push_back(error);
  }
  if (write) std::ofstream(PX_PUBLISHED_RUNS) << json.dump(2) << "\n";
  std::sort(errors.begin(), errors.end());
  const size_t n = errors.size();
  const double median = n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
  EXPECT_LE(median, kMedianTolerance);
  std::cout << "published runs: median |error| " << 100 * median << "%, worst " << 100 * errors.back() << "%\n";
}

}  // namespace
}  // namespace px::plan
