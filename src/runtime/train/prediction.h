// Predicted against measured: what the planner's simulator (plan/simulate.h)
// says a training run's step takes and rank 0 holds, on this host's `local`
// cluster spec (`parallax calibrate`), set beside what the run measured.
// Without a calibration the host's rates are probed in a moment and every
// kernel is its roofline, and the prediction says so.
#pragma once

#include <string>
#include <vector>

#include "parallel/program.h"
#include "plan/cluster.h"
#include "plan/simulate.h"
#include "comm/collectives.h"

namespace px {

struct RunPrediction {
  std::string basis;          // where the figures come from, for people
  bool calibrated = false;
  double step_seconds = 0;
  double peak_bytes = 0;      // rank 0's
  double activation_peak_bytes = 0;  // rank 0's forward activations at their peak
  std::vector<double> peak_bytes_per_rank;  // the memory model's peak of every rank
  std::vector<plan::SimulatedEvent> timeline;  // one step as the simulator replayed it, every rank
  plan::Assumptions assumed;  // what it took the largest GEMM, attention and collective to cost
};

// The local spec saved at `path`, or one probed now (no kernel timings) when there is none.
plan::ClusterSpec local_cluster(const std::string& path, int ranks, bool* calibrated);

// How the run ran, as the simulator is told it.
struct RunAsRan {
  std::string local_cluster;         // the local spec's path (--local-cluster)
  bool mpi = false;                  // the ranks were MPI processes (else threads of this process)
  bool bf16 = false;                 // --precision bf16
  bool overlap = true;               // collectives on progress threads
  int threads = 1;                   // a lone rank's kernel threads
  double link_gbps = 0;              // in-process links' limit (0: none)
  comm::CollectiveOptions collective;
  int optimizer_slots = 0;           // optimizer state tensors per parameter
};

// Every rank's Program of the strategy (plan::lower_all) replayed on the
// local spec at run.local_cluster.
RunPrediction predict_run(const RunAsRan& run, const std::vector<parallel::Program>& programs);

// "predicted step 0.412 s, measured 0.398 s (+3.5%); ..." lines.
std::string describe_prediction(const RunPrediction& prediction, double measured_step_seconds,
                                double measured_peak_bytes, double measured_activation_peak_bytes);

}  // namespace px
