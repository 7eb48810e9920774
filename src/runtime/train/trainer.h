// The training loop shared by every task: the strategy (from the flags or
// --strategy) lowered to this rank's Program, run step by step by a
// ProgramExecutor on batches from the task, on the LR schedule; evaluation,
// metrics, progress, traces and checkpoints.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/train/pipeline_report.h"
#include "runtime/train/memory_report.h"
#include "runtime/tasks/task.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/train/run_report.h"
#include "parallel/strategy.h"

namespace px {

// A data-parallel run's own figures beside the common report (rank 0's).
struct DataParallelReport {
  int64_t skipped_runs = 0;    // step runs not applied: their loss or gradients were not finite
  std::vector<int64_t> bad_batches;  // batches skipped for good (failed twice, or --skip-batches)
  // Bytes held between steps (runtime/train/memory_report.h), under
  // ZeRO-2/3 the most bucket-buffer bytes alive at once, and under ZeRO-3
  // the most gathered parameter bytes alive at once.
  RankMemory memory;
  int64_t gradient_buffer_peak_bytes = 0;
  int64_t gathered_parameter_peak_bytes = 0;
  // Bytes sent in the last step, by mesh axis name.
  std::map<std::string, int64_t> bytes_per_axis;
  // Per host (rank 0's is 0): bytes its ranks send to other hosts a step,
  // as their Programs account them; one entry on one host.
  std::vector<double> bytes_between_hosts;
  // Pipelines: every pipeline rank's measurements (its data and tensor
  // coordinate 0) over the steps after the first, and the peak of forward
  // activations any step kept (bytes; every run, pipelined or not).
  std::vector<StageMeasurement> pipeline_stages;
  int64_t activation_peak_bytes = 0;
  // The median wall time of the steps after the first, and with
  // --local-cluster what the simulator predicted for the step, rank 0's
  // peak and its forward activations' peak.
  // Straggler scores per rank (StragglerScores::summary), and the row
  // shares a rebalance asked for (`parallax launch --rebalance`).
  nlohmann::json stragglers;
  std::optional<std::vector<int64_t>> rebalance;
  double measured_step_seconds = 0;
  double predicted_step_seconds = 0;
  double predicted_peak_bytes = 0;
  double predicted_activation_peak_bytes = 0;
};

struct DataParallelResult {
  RunReport run;
  DataParallelReport data_parallel;
};

// The optimizer a strategy's updates run: without momentum when the
// strategy moved it into the ranks (DGC's momentum correction).
OptimizerConfig optimizer_for_strategy(OptimizerConfig optimizer, const parallel::Strategy& strategy);


}  // namespace px
