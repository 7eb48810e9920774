// The published runs the GPU presets were checked against, and how far
// off the simulator was on each when last scored: the development set
// (bench/published_runs.json, embedded at build time), each run with the
// prediction tests/plan/published_scale_test.cc replays and pins. A
// prediction names its nearest checked runs (GPUs, tensor and pipeline
// degrees, parameters), so a user sees how the model fared on runs of its
// shape (`parallax simulate`).
#pragma once

#include <string>
#include <vector>

namespace px::plan {

struct CheckedRun {
  std::string id;
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

// The development set, as embedded at build time.
std::vector<CheckedRun> checked_runs();
// The same from a JSON text of bench/published_runs.json's form.
std::vector<CheckedRun> checked_runs(const std::string& json);

// The shape a prediction is compared by.
struct RunShape {
  int gpus = 1, tp = 1, pp = 1;
  double parameters = 0;
};
// The `count` scored runs nearest `shape`: by the sum of |log| ratios of
// GPUs, tensor and pipeline degrees and parameters, nearest first.
std::vector<CheckedRun> nearest_checked_runs(const RunShape& shape, size_t count = 3);
// Lines for `simulate`: each run's shape, predicted and published seconds and error.
std::string describe_checked(const std::vector<CheckedRun>& runs);

}  // namespace px::plan
