// The trainer's parts: one rank's whole job (its stages: rank_trainer.h),
// and what a restarting job gives it (trainer.cc).
#pragma once

#include <atomic>
#include <ostream>

#include "comm/communicator.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/fault/fault_injection.h"
#include "runtime/fault/flight_recorder.h"
#include "runtime/checkpoint/snapshots.h"
#include "runtime/train/trainer.h"

namespace px {

// An error every rank meets alike before any talks to another (the
// strategy's parts do not combine): the job's, reported without a rank.
struct JobConfigurationError : Error {
  using Error::Error;
};

// What a job that restarts gives its ranks (trainer.cc).
struct RankRecovery {
  SnapshotStore* snapshots = nullptr;       // keep in-memory snapshots here at --save-every steps
  const Checkpoint* restore = nullptr;      // start from this state instead of --resume
  std::atomic<double>* ready_at = nullptr;  // rank 0 sets it (unix seconds) when ready for its first step
};

// One rank's whole job. `group` is the world (nullptr: one rank); only
// rank 0 writes logs, metrics and checkpoints (`log` is a null stream
// elsewhere). The executor records into `recorder`.
TrainResult train_rank(TrainOptions o, comm::Communicator* group, std::ostream& log, FlightRecorder* recorder,
                       const RankRecovery& recovery = {});

}  // namespace px
