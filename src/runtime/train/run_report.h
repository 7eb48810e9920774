// What every run reports, whatever its mode (data-parallel: trainer.h;
// parameter server: runtime/parameter_server/parameter_server.h): its
// steps, losses, final evaluation and time.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tasks/task.h"

namespace px {

struct RunReport {
  int64_t steps = 0;
  int64_t first_step = 0;      // the step this run started after (a resume's or restart's step)
  double last_train_loss = 0;
  std::vector<double> losses;  // per step run in this call (applied steps only)
  Evaluation evaluation;
  double seconds = 0;
  int64_t peak_tensor_bytes = 0;  // rank 0's
};

}  // namespace px
