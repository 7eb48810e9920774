// The job: its ranks (in this thread, as threads of this process, or as
// this MPI process), the watchdog that names a silent one, the mode each
// rank runs (data-parallel or parameter server) and, in process, the
// restarts after a failure (docs/fault_tolerance.md).
#pragma once

#include <ostream>
#include <utility>
#include <vector>

#include "runtime/train/train_options.h"
#include "runtime/train/trainer.h"

namespace px {

// Runs the whole job described by `options`; progress and results go to `log`.
TrainResult train(TrainOptions options, std::ostream& log);

// The wall time restarts lost: the length of the union of each restart's
// [when the state it resumed from was taken, when it was ready again]
// (two restarts from one snapshot lose their overlap once).
double restart_time_lost(std::vector<std::pair<double, double>> spans);

}  // namespace px
