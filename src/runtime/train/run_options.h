// How a data-parallel or parameter-server run goes, apart from what it
// trains and how it is split: the train room's part of a job. How long, how
// often it evaluates, its seed and threads, and what it writes beside the
// checkpoint.
#pragma once

#include <cstdint>
#include <string>

namespace px {

struct RunOptions {
  int64_t steps = 0;             // total steps; or
  int64_t epochs = 0;            // whole epochs (classifiers)
  int64_t eval_every = 0;        // steps; 0 = only at the end
  uint64_t seed = 1;             // the initial parameters, the data order and dropout
  int threads = 1;               // kernel threads of a lone rank (in-process ranks use 1 each)
  bool overlap = true;           // collectives on progress threads while compute continues (ExecutionOptions)
  std::string metrics;           // JSON-lines file
  std::string trace;             // Chrome trace of steps 2-4 (compute and communication per rank)
  int64_t stop_after = 0;        // end (and save) after this step, as if preempted; 0 = off
  int64_t sample_tokens = 0;     // GPT: print a sample of this many bytes at the end
  std::string prompt = "\n";
  bool progress_bar = false;     // else plain periodic lines
  // Non-empty: end with predicted vs measured step time and memory on the
  // local spec saved here (runtime/train/prediction.h; `parallax train` sets it).
  std::string local_cluster;
  // A rank whose recent step compute is this many times the fastest rank's
  // for kStragglerSteps of its steps in a row is named a straggler while
  // the job runs (straggler_scores.h).
  double straggler_threshold = 1.5;
  // `parallax launch --rebalance`: a straggler named and still named a
  // window later ends the job with a checkpoint and the measured rates
  // (straggler_watch.h), for the launcher to restart split by them.
  bool rebalance = false;
  bool operator==(const RunOptions&) const = default;
};

// px::Error naming the bad option (a run of no steps, negative intervals).
void validate(const RunOptions& options);

}  // namespace px
