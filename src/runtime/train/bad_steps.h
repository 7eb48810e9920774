// Bad steps, MapReduce's bad-record skipping: a step whose loss or
// gradients are not finite changes nothing (the executor skips its updates
// on every rank); its batch runs once more (a transient fault passes), and
// a batch that fails twice is skipped for good: recorded, saved with
// checkpoints, and never trained on again. Batches are numbered from 1 in
// the order drawn; every rank draws and skips alike.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint_state.h"
#include "runtime/executor/program_executor.h"
#include "runtime/fault/fault_options.h"
#include "runtime/tasks/task.h"
#include "runtime/train/metrics.h"
#include "runtime/train/progress.h"

namespace px {

class BadSteps {
 public:
  // Starting after `step`: the batches --skip-batches names and those the
  // resumed state skipped for good are never drawn. `lr` is the schedule's
  // peak, which a diverging run's error suggests lowering.
  BadSteps(const FaultOptions& fault, double lr, const CheckpointState* resumed, int64_t step);

  // This rank's shard of the next batch not skipped for good.
  DataBatch draw(Task& task, const parallel::RowSplit& split, int data_rank);
  // --inject-nan: the batch drawn first for step `step` (0-based) is made
  // non-finite when the option names the step (a batch drawn in its place
  // is not).
  void poison_if_named(int64_t step);
  // Whether the batch drawn last is one --inject-nan made non-finite.
  bool poisoned() const { return poisoned_.contains(batch_number_); }
  // The batch drawn last's run `attempt` (1 or 2) at step `step` was not
  // applied: says so in the metrics and the log. Returns true when the
  // batch is now skipped for good (draw another); fails when 8 batches in
  // a row were.
  bool not_applied(const StepResult& out, int64_t step, int attempt, MetricsLog& metrics, Progress& progress);
  // The step was applied: the run of failed batches ends.
  void applied() { consecutive_bad_ = 0; }

  int64_t skipped_runs() const { return skipped_runs_; }
  int64_t batches_drawn() const { return batches_drawn_; }
  std::vector<int64_t> bad_batches() const { return {bad_batches_.begin(), bad_batches_.end()}; }

 private:
  std::vector<int64_t> inject_nan_steps_;  // --inject-nan
  double lr_;
  std::set<int64_t> bad_batches_;
  std::set<int64_t> poisoned_;  // --inject-nan: the batches made non-finite
  int64_t batches_drawn_;       // without skips, step s trains on batch s
  int64_t batch_number_ = 0;    // the batch drawn last
  nlohmann::json batch_state_;  // the data order just before it: where it is
  int64_t skipped_runs_ = 0, consecutive_bad_ = 0;
};

}  // namespace px
