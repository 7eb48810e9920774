// The training loop shared by every task: the strategy (from the flags or
// --strategy) lowered to this rank's Program, run step by step by a
// ProgramExecutor on batches from the task, on the LR schedule; evaluation,
// metrics, progress, traces and checkpoints.
#pragma once

#include <map>

#include <ostream>

#include "runtime/train/pipeline_report.h"
#include "runtime/train/memory_report.h"
#include "runtime/tasks/task.h"
#include "runtime/train/train_options.h"

namespace px {

struct TrainResult {
  int64_t steps = 0;
  double last_train_loss = 0;
  Evaluation evaluation;
  double seconds = 0;
  int64_t peak_tensor_bytes = 0;
  std::vector<double> losses;  // per step run in this call (applied steps only)
  int64_t first_step = 0;      // the step this call started after (a resume's or restart's step)
  int64_t skipped_runs = 0;    // step runs not applied: their loss or gradients were not finite
  std::vector<int64_t> bad_batches;  // batches skipped for good (failed twice, or --skip-batches)
  int restarts = 0;            // in-process restarts after failures (--max-restarts)
  double lost_seconds = 0;     // wall time they lost: from each restored state's snapshot until ready again
  int64_t max_staleness = 0;   // parameter-server modes: the most clocks a worker's parameters lagged behind
  std::vector<int64_t> dropped_pushes;  // parameter-server bsp: per worker, gradients left out of their step's update
  std::vector<int> gradients_per_update;  // parameter-server bsp: per step, the workers' gradients its update summed
  // Data parallelism, rank 0: bytes held between steps (runtime/train/memory_report.h),
  // under ZeRO-2/3 the most bucket-buffer bytes alive at once, and under
  // ZeRO-3 the most gathered parameter bytes alive at once.
  RankMemory memory;
  int64_t gradient_buffer_peak_bytes = 0;
  int64_t gathered_parameter_peak_bytes = 0;
  // Rank 0's bytes sent in its last step, by mesh axis name.
  std::map<std::string, int64_t> bytes_per_axis;
  // Per host (rank 0's is 0): bytes its ranks send to other hosts a step,
  // as their Programs account them; one entry on one host.
  std::vector<double> bytes_between_hosts;
  // Pipelines, rank 0: every pipeline rank's measurements (its data and
  // tensor coordinate 0) over the steps after the first, and the peak of
  // forward activations any step kept (bytes; every run, pipelined or not).
  std::vector<StageMeasurement> pipeline_stages;
  int64_t activation_peak_bytes = 0;
  // Rank 0: the median wall time of the steps after the first, and with
  // options.predict what the simulator predicted for the step, rank 0's
  // peak and its forward activations' peak.
  double measured_step_seconds = 0;
  double predicted_step_seconds = 0;
  double predicted_peak_bytes = 0;
  double predicted_activation_peak_bytes = 0;
};

// The strategy the options describe for `world` ranks, or the one
// --strategy names (its mesh must have `world` ranks), validated: the
// options' parts and the run's figures handed to parallel::compose.
parallel::Strategy strategy_for(const TrainOptions& options, const nn::Model& model, int world);
// The optimizer a strategy's updates run: without momentum when the
// strategy moved it into the ranks (DGC's momentum correction).
OptimizerConfig optimizer_for_strategy(OptimizerConfig optimizer, const parallel::Strategy& strategy);


}  // namespace px
