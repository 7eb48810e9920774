// The training loop shared by every task: batches from the task, forward and
// backward through a CompiledModel per micro-batch shape, gradient
// accumulation and clipping, the optimizer step on the LR schedule,
// evaluation, metrics, progress and checkpoints.
#pragma once

#include <ostream>

#include "runtime/memory_report.h"
#include "runtime/task.h"
#include "runtime/train_options.h"

namespace px {

struct TrainResult {
  int64_t steps = 0;
  double last_train_loss = 0;
  Evaluation evaluation;
  double seconds = 0;
  int64_t peak_tensor_bytes = 0;
  std::vector<double> losses;  // per step run in this call
  int64_t max_staleness = 0;   // parameter-server modes: the most clocks a worker's parameters lagged behind
  std::vector<int64_t> dropped_pushes;  // parameter-server bsp: per worker, gradients left out of their step's update
  std::vector<int> gradients_per_update;  // parameter-server bsp: per step, the workers' gradients its update summed
  // Data parallelism, rank 0: bytes held between steps (runtime/memory_report.h)
  // and, under ZeRO-2, the most bucket-buffer bytes alive at once.
  RankMemory memory;
  int64_t gradient_buffer_peak_bytes = 0;
};

// Runs the whole job described by `options`; progress and results go to `log`.
TrainResult train(TrainOptions options, std::ostream& log);

}  // namespace px
