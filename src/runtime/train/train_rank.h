// The trainer's parts: one rank's whole job (its stages: rank_trainer.h),
// what a restarting job gives it (trainer.cc), and how an injected fault
// stops an in-process rank.
#pragma once

#include <atomic>
#include <ostream>

#include "comm/communicator.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/fault/flight_recorder.h"
#include "runtime/checkpoint/snapshots.h"
#include "runtime/train/trainer.h"

namespace px {

// An in-process rank that --inject-fault stopped: its thread ends quietly
// (a dead process tells nobody), and the others must notice its silence.
struct RankStopped {};

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

// Seconds since the Unix epoch (checkpoints' "saved_at", restarts' times).
double unix_seconds();

// --inject-fault, at the start of the step it names: this rank dies,
// freezes or is lost for good (fault_injection.cc). Throws RankStopped in process.
void inject_fault(const TrainOptions& o, FlightRecorder* recorder, comm::Communicator* group);

// One rank's whole job. `group` is the world (nullptr: one rank); only
// rank 0 writes logs, metrics and checkpoints (`log` is a null stream
// elsewhere). The executor records into `recorder`.
TrainResult train_rank(TrainOptions o, comm::Communicator* group, std::ostream& log, FlightRecorder* recorder,
                       const RankRecovery& recovery = {});

}  // namespace px
