#include "runtime/train/bad_steps.h"

#include <algorithm>

namespace px {

BadSteps::BadSteps(const FaultOptions& fault, double lr, const CheckpointState* resumed, int64_t step)
    : inject_nan_steps_(fault.inject_nan_steps),
      lr_(lr),
      bad_batches_(fault.skip_batches.begin(), fault.skip_batches.end()),
      batches_drawn_(step) {
  if (resumed == nullptr) return;
  batches_drawn_ = resumed->batches.value_or(step);
  bad_batches_.insert(resumed->bad_batches.begin(), resumed->bad_batches.end());
}

DataBatch BadSteps::draw(Task& task, const parallel::RowSplit& split, int data_rank) {
  for (;;) {
    batch_state_ = task.data_state();
    DataBatch batch = task.next_batch(split, data_rank);
    batch_number_ = ++batches_drawn_;
    if (!bad_batches_.contains(batch_number_)) return batch;
  }
}

void BadSteps::poison_if_named(int64_t step) {
  const std::vector<int64_t>& nan_steps = inject_nan_steps_;
  if (std::find(nan_steps.begin(), nan_steps.end(), step + 1) != nan_steps.end()) poisoned_.insert(batch_number_);
}

bool BadSteps::not_applied(const StepResult& out, int64_t step, int attempt, MetricsLog& metrics,
                           Progress& progress) {
  ++skipped_runs_;
  const bool for_good = attempt == 2;
  metrics.write({{"step", step + 1}, {"skipped_batch", batch_number_}, {"attempt", attempt},
                 {"skipped_for_good", for_good}, {"train_loss", out.loss}, {"grad_norm", out.grad_norm},
                 {"data_state", batch_state_}});
  progress.message(fmt::format("step {}: loss {}, gradient norm {}: not applied; batch {} (data state {}) {}", step + 1,
                               out.loss, out.grad_norm, batch_number_, batch_state_.dump(),
                               for_good ? "failed twice: skipped for good" : "runs once more"));
  if (!for_good) return false;
  bad_batches_.insert(batch_number_);
  if (++consecutive_bad_ == 8)
    fail("training diverged at step {}: 8 batches in a row failed twice (the last, batch {}, with loss {} and "
         "gradient norm {}); lower the learning rate {} or enable --grad-clip",
         step + 1, batch_number_, out.loss, out.grad_norm, lr_);
  return true;
}

}  // namespace px
