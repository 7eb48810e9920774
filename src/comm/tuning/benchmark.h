// Measuring collectives, in the spirit of nccl-tests: per collective,
// algorithm and size, the time per call (the slowest rank's, median over
// rounds), algorithm bandwidth (bytes / time), bus bandwidth (algbw times the
// collective's traffic factor, e.g. 2(p-1)/p for allreduce, so it is
// comparable across rank counts) and the cost model's prediction.
// tune_cost_model() measures the cost model's parameters on this host. Used by
// `parallax bench comm` and bench/comm_allreduce.
//
// The host is shared and noisy: other tenants of the hardware slow it 1.5-4x
// for tens of seconds, invisibly to its CPU counters. So a timing is a batch
// of calls lasting at least target_seconds; every (size, algorithm) point gets
// one batch per round, a round being a pass over all points in a shuffled
// order, so a slow spell hits a few rounds of a point, not all of them; a
// batch during which other processes used more than max_foreign_load of the
// CPU is retaken at once; and a stretch of time in which the points measured
// ran, together, more than max_drift slower (or faster) than their own
// medians is retaken after the rounds (find_disturbed), for at most
// max_retake_seconds. The reported time is the median of a point's batches
// kept, those of disturbed stretches left out.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "comm/cost_model.h"

namespace px::comm {

struct BenchmarkOptions {
  Collective collective = Collective::allreduce;
  std::vector<Algorithm> algorithms{};  // empty: every runnable one
  std::vector<int64_t> sizes{};       // bytes of the collective's n (float32)
  int iterations = 0;                 // per batch; 0: as many as fill target_seconds
  int rounds = 15;                    // batches per point, one per pass over all points
  double target_seconds = 0.01;       // per batch when iterations == 0
  double max_foreign_load = 0.10;     // retake a batch when others used more CPU
  int max_retakes = 8;                // per batch; then it is kept, counted as dirty
  double max_drift = 0.20;            // retake stretches of time this much off (find_disturbed)
  double max_retake_seconds = 60;     // then batches still disturbed are left out
  bool check = false;                 // verify the result once per size and algorithm
  CollectiveOptions collective_options{};  // servers, ranks_per_node
  bool operator==(const BenchmarkOptions&) const = default;
};

struct BenchmarkRow {
  Collective collective = Collective::allreduce;
  Algorithm algorithm = Algorithm::ring;
  int ranks = 1;
  int64_t bytes = 0;
  int iterations = 0;
  double seconds = 0;  // per call: median over kept batches of the slowest rank's mean
  double spread = 0;   // (max - min) / median over the batches kept
  int retaken = 0;     // batches retaken (foreign CPU load, or a disturbed stretch)
  int dirty = 0;       // batches kept although still contaminated
  int unreplaced = 0;  // disturbed batches no retake replaced (the point has rounds - this)
  double algbw = 0;    // GB/s (1e9 B/s)
  double busbw = 0;    // GB/s
  double predicted_seconds = 0;
  int checked = -1;    // -1 not checked, 0 wrong, 1 right
  std::vector<double> batches{};  // per-call seconds of the batches kept, in the order taken
};

// One (algorithm, size) to time; a point listed twice is timed twice, apart.
struct BenchmarkPoint {
  Algorithm algorithm = Algorithm::ring;
  int64_t bytes = 0;
};

using ProgressFn = std::function<void(const std::string&)>;

// nccl-tests' bus-bandwidth factor for the collective on p ranks.
double bus_factor(Collective collective, int ranks);

// Collective over comm; every rank returns the same rows, sizes outer and
// algorithms inner. on_row (optional) is called on every rank for each row
// once all rounds are done; progress (optional) gets a line per round.
std::vector<BenchmarkRow> run_benchmark(Communicator& comm, const BenchmarkOptions& options,
                                        const std::function<void(const BenchmarkRow&)>& on_row = {},
                                        const ProgressFn& progress = {});

// Collective: times `points` (options.sizes and options.algorithms unused)
// in the same rounds; rows in the order of points.
std::vector<BenchmarkRow> time_points(Communicator& comm, const BenchmarkOptions& options,
                                      const std::vector<BenchmarkPoint>& points,
                                      const ProgressFn& progress = {});

// One timed batch as find_disturbed sees it.
struct TimedBatch {
  double seconds = 0;    // per call
  int window = 0;        // the stretch of time it ran in (consecutive batches)
  bool clean = true;     // no foreign CPU load seen
  bool disturbed = false;  // in a stretch find_disturbed rejected
};

// batches[i]: point i's batches; family[i]: which points a slow spell hits
// alike (here: working set in cache or past it). Fits log time = point level
// + stretch effect (per window and family, robustly, by medians), the
// effects' median being 0, and marks disturbed every clean batch whose
// stretch is off by more than max_drift; returns how many it marked. Pure.
int find_disturbed(std::vector<std::vector<TimedBatch>>& batches, const std::vector<int>& family,
                   double max_drift);

// Collective over comm: the link parameters alpha, beta, gamma of the
// transport and the shared segment, measured in cache (seconds); the
// algorithms' fits are left empty (their defaults).
CostModel measure_links(Communicator& comm, const ProgressFn& progress);

// Collective over comm: measures link parameters (alpha, beta, gamma for the
// transport and the shared segment) and fits each allreduce algorithm's
// factors to times measured at `sizes`; returns the tuned model (equal on
// every rank). progress (optional) receives a line per measurement.
// sweep (optional) receives the timings the fit was made from.
CostModel tune_cost_model(Communicator& comm, const std::vector<int64_t>& sizes,
                          const ProgressFn& progress = {},
                          std::vector<BenchmarkRow>* sweep = nullptr);

struct TunedCheck {
  CostModel model;
  std::vector<BenchmarkRow> sweep;  // what the model was fitted to
  std::vector<BenchmarkRow> check;  // timed apart from the sweep; predicted by `model`
  int attempts = 1;        // timings taken (a new one when the last was unsettled)
  std::string unsettled;   // why the last attempt's timings disagree with themselves; empty: settled
};

// Whether a timing of the sweep and the check can be trusted, from the
// timings alone (never the model): the points both timed, measured twice in
// the same rounds, agree within max_disagreement, and at most 1% of the
// batches were disturbed and never replaced. Returns why not; empty when
// settled.
std::string unsettled_reason(const std::vector<BenchmarkRow>& sweep,
                             const std::vector<BenchmarkRow>& check, int rounds,
                             double max_disagreement = 0.25);

// tune_cost_model at tuning_sizes, then `check` measured and predicted by the
// tuned model. An allreduce check is timed in the same rounds as the sweep
// (its own batches, never fitted), so both see the same machine; when those
// timings are unsettled (unsettled_reason: the host changed state for a
// minute) they are taken again, at most max_attempts times in all, and the
// model is fitted to the last. Other collectives are checked after the
// tuning. Collective; sets comm's cost model.
TunedCheck tune_and_check(Communicator& comm, const std::vector<int64_t>& tuning_sizes,
                          const BenchmarkOptions& check, const ProgressFn& progress = {},
                          int max_attempts = 3);

// The fitting half of tune_cost_model: `links` with its link parameters
// measured; rows are allreduce timings (any algorithms and rank counts, at
// least three sizes each). Returns `links` with the cache size and cliff and
// every (algorithm, ranks)'s factors that minimize the squared relative error
// of the predictions (factors >= 0); *rms_relative_error (optional) gets its
// root mean square over all rows.
CostModel fit_allreduce_model(const CostModel& links, const std::vector<BenchmarkRow>& rows,
                              double* rms_relative_error = nullptr);

// Sizes --tune times: 64 KiB .. 64 MiB by factors of 2, and between 512 KiB
// and 32 MiB also sqrt(2) above each (the cache cliffs, between 1 and 16 MiB
// here, need points inside them to be located).
std::vector<int64_t> default_tuning_sizes();

}  // namespace px::comm
