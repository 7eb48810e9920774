// Measuring collectives, in the spirit of nccl-tests: per collective,
// algorithm and size, the time per call (the slowest rank's, median of
// repeats), algorithm bandwidth (bytes / time), bus bandwidth (algbw times
// the collective's traffic factor, e.g. 2(p-1)/p for allreduce, so it is
// comparable across rank counts) and the cost model's prediction. tune()
// measures the cost model's parameters on this host. Used by
// `parallax bench comm` and bench/comm_allreduce.
//
// The host is shared and noisy, so a timing is a batch of calls lasting at
// least target_seconds; the repeats of every algorithm at one size are
// interleaved (round-robin, rotating the order) so drift hits all alike; and a
// batch during which other processes used more than max_foreign_load of the
// machine's CPU, or (for working sets past the cache) after which a DRAM copy
// ran max_memory_slowdown slower than the fastest seen (machine_load.h), is
// retaken after the machine quietens.
#pragma once

#include <functional>
#include <vector>

#include "comm/collectives.h"
#include "comm/cost_model.h"

namespace px::comm {

struct BenchmarkOptions {
  Collective collective = Collective::allreduce;
  std::vector<Algorithm> algorithms{};  // empty: every runnable one
  std::vector<int64_t> sizes{};       // bytes of the collective's n (float32)
  int iterations = 0;                 // per repeat; 0: as many as fill target_seconds
  int repeats = 5;                    // timed batches; the median is reported
  double target_seconds = 0.03;       // per repeat when iterations == 0
  double max_foreign_load = 0.10;     // retake a batch when others used more CPU
  double max_memory_slowdown = 1.25;  // retake a batch when a DRAM copy was this much slower
  double memory_probe_above = 8 << 20;  // probe DRAM when p · n exceeds this many bytes
  int max_retakes = 8;                // per batch; then it is kept, counted as dirty
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
  double seconds = 0;  // per call: median over clean repeats of the slowest rank's mean
  double spread = 0;   // (max - min) / median over the repeats kept
  int retaken = 0;     // batches retaken because of foreign CPU load
  int dirty = 0;       // repeats kept although still contaminated
  double algbw = 0;    // GB/s (1e9 B/s)
  double busbw = 0;    // GB/s
  double predicted_seconds = 0;
  int checked = -1;    // -1 not checked, 0 wrong, 1 right
};

// nccl-tests' bus-bandwidth factor for the collective on p ranks.
double bus_factor(Collective collective, int ranks);

// Collective over comm; every rank returns the same rows. on_row (optional)
// is called on every rank as each row completes.
std::vector<BenchmarkRow> run_benchmark(Communicator& comm, const BenchmarkOptions& options,
                                        const std::function<void(const BenchmarkRow&)>& on_row = {});

// Collective over comm: measures link parameters (alpha, beta, gamma for the
// transport and the shared segment) and fits each allreduce algorithm's
// factors to times measured at `sizes`; returns the tuned model (equal on
// every rank). progress (optional) receives a line per measurement.
// sweep (optional) receives the timings the fit was made from.
CostModel tune_cost_model(Communicator& comm, const std::vector<int64_t>& sizes,
                          const std::function<void(const std::string&)>& progress = {},
                          std::vector<BenchmarkRow>* sweep = nullptr);

// The fitting half of tune_cost_model: `links` with its link parameters
// measured; rows are allreduce timings (any algorithms and rank counts, at
// least three sizes each). Returns `links` with the cache size and cliff and
// every (algorithm, ranks)'s factors that minimize the squared relative error
// of the predictions (factors >= 0); *rms_relative_error (optional) gets its
// root mean square over all rows.
CostModel fit_allreduce_model(const CostModel& links, const std::vector<BenchmarkRow>& rows,
                              double* rms_relative_error = nullptr);

// Sizes --tune times: 64 KiB .. 64 MiB by factors of 2 (the cache cliff,
// between 4 and 16 MiB here, needs points inside it to be located).
std::vector<int64_t> default_tuning_sizes();

// Sizes 4 B .. 256 MiB by factors of 4 (nccl-tests' default sweep shape).
std::vector<int64_t> default_benchmark_sizes();

}  // namespace px::comm
