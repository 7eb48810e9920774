// The published runs the GPU presets were checked against, and how far
// off the simulator was on each: the development set
// (bench/published_runs.json), each run with the prediction
// tests/plan/published_scale_test.cc replays and pins, and the held-out
// set (bench/published_heldout.json), each run with the prediction it was
// scored with once (2026-11-30), both embedded at build time. A
// prediction names its nearest checked runs (GPUs, tensor and pipeline
// degrees, parameters), so a user sees how the model fared on runs of its
// shape (`parallax simulate`, and `parallax plan --explain`'s file, which
// the report shows).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "parallel/strategy.h"

namespace px::plan {

struct CheckedRun {
  std::string id;
  std::string set = "development";  // or "held-out"
  std::string preset;  // the cluster preset it was replayed on (its node count from gpus)
  int64_t layers = 0, heads = 0, embd = 0, batch = 0, sequence = 0, vocab = 0;
  int gpus = 0, tp = 1, pp = 1;
  std::string recompute = "full";
  bool sequence_parallel = false;
  bool overlap = true;  // gradient reduction overlapped with backward
  std::string attention_kernel = "flash";  // the run's attention, as simulate's --attention-kernel
  double published_seconds = 0;  // the source's iteration time, or its teraFLOP/s by Narayanan et al.'s count
  double predicted_seconds = 0;  // the simulator's, when last scored (0: never)
  double parameters() const;     // the GPT-2 block's count (nn::parameter_count)
  double error() const { return predicted_seconds / published_seconds - 1; }  // signed: + slow, - fast
};

// Both sets, as embedded at build time: the development set's runs, then
// the held-out set's (its scored ones).
std::vector<CheckedRun> checked_runs();
// The runs of a JSON text of bench/published_runs.json's form.
std::vector<CheckedRun> checked_runs(const std::string& json);
// The runs of a JSON text of bench/published_heldout.json's form, each
// with its one score (none before scoring).
std::vector<CheckedRun> held_out_runs(const std::string& json);

// The shape a prediction is compared by.
struct RunShape {
  int gpus = 1, tp = 1, pp = 1;
  double parameters = 0;
  std::string preset;  // the cluster preset's name (dgx-a100, dgx-h100); empty: any
};
// The shape of `strategy` on `gpus` ranks: its tensor-parallel degree is
// what its pipeline, row (data x expert) and context axes leave.
RunShape run_shape(const parallel::Strategy& strategy, int gpus, double parameters, const std::string& preset);
// The `count` scored runs nearest `shape`: by the sum of |log| ratios of
// GPUs, tensor and pipeline degrees and parameters, plus 1 (an e-fold of
// one of them) for a run on another preset's GPU; nearest first.
std::vector<CheckedRun> nearest_checked_runs(const RunShape& shape, size_t count = 3);
// Lines for `simulate`: each run's set, shape, predicted and published seconds and error.
std::string describe_checked(const std::vector<CheckedRun>& runs);
// The same as JSON (`plan --explain`, the report): id, set, preset, gpus,
// tp, pp, parameters, predicted_s, published_s, error.
nlohmann::json checked_json(const std::vector<CheckedRun>& runs);

}  // namespace px::plan
