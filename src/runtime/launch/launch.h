// The job: its ranks (in this thread, as threads of this process, or as
// this MPI process), the watchdog that names a silent one, the mode each
// rank runs (data-parallel or parameter server) and, in process, the
// restarts after a failure (docs/fault_tolerance.md).
#pragma once

#include <ostream>
#include <utility>
#include <vector>

#include <optional>

#include "runtime/launch/job_spec.h"
#include "runtime/parameter_server/parameter_server.h"
#include "runtime/sync/train_sync.h"
#include "runtime/train/trainer.h"

namespace px {

// What a job reports (rank 0's): the common run report, the figures of the
// mode it ran, and its in-process restarts.
struct JobResult {
  RunReport run;
  std::optional<DataParallelReport> data_parallel;        // a data-parallel job's
  std::optional<ParameterServerReport> parameter_server;  // a parameter-server job's
  std::optional<SyncReport> sync;                         // a synchronized-replicas job's
  int restarts = 0;          // in-process restarts after failures (--max-restarts)
  double lost_seconds = 0;   // wall time they lost: from each restored state's snapshot until ready again
};

// Runs the whole job `job` describes (validate_job first); progress and
// results go to `log`.
JobResult train(JobSpec job, std::ostream& log);

// The wall time restarts lost: the length of the union of each restart's
// [when the state it resumed from was taken, when it was ready again]
// (two restarts from one snapshot lose their overlap once).
double restart_time_lost(std::vector<std::pair<double, double>> spans);

}  // namespace px
