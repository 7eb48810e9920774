// The trainer's parts: one rank's whole job (its stages: rank_trainer.h),
// and what a restarting job gives it (trainer.cc).
#pragma once

#include <atomic>
#include <ostream>

#include "comm/communicator.h"
#include "runtime/checkpoint/checkpoint.h"
#include "parallel/compose.h"
#include "runtime/fault/fault_options.h"
#include "runtime/fault/flight_recorder.h"
#include "runtime/checkpoint/snapshots.h"
#include "runtime/train/run_options.h"
#include "runtime/train/trainer.h"

namespace px {

// An error every rank meets alike before any talks to another (the
// strategy's parts do not combine): the job's, reported without a rank.
struct JobConfigurationError : Error {
  using Error::Error;
};

// What the launcher tells a rank of where it runs (runtime/launch).
struct RankLaunch {
  int attempt = 0;       // 0 first, k after k restarts (--inject-fault fires on attempt 0 only)
  bool mpi = false;      // the ranks are MPI processes (else threads of this process)
  int local_ranks = 0;   // under MPI: the ranks on this machine (0: unknown)
  double link_gbps = 0;  // in-process links' limit (the end-of-run prediction models it)
};

// What a job that restarts gives its ranks (runtime/launch).
struct RankRecovery {
  SnapshotStore* snapshots = nullptr;       // keep in-memory snapshots here at --save-every steps
  const Checkpoint* restore = nullptr;      // start from this state instead of --resume
  std::atomic<double>* ready_at = nullptr;  // rank 0 sets it (unix seconds) when ready for its first step
};

// One rank's whole data-parallel job, from the parts of the job its rooms
// own. `group` is the world (nullptr: one rank); only rank 0 writes logs,
// metrics and checkpoints (`log` is a null stream elsewhere). The executor
// records into `recorder`.
DataParallelResult train_rank(const nn::ModelConfig& model, const DataOptions& data,
                              const parallel::StrategyRequest& strategy, const OptimizerOptions& optimizer,
                              const CheckpointOptions& checkpoint, const FaultOptions& fault, const RunOptions& run,
                              const RankLaunch& launch, comm::Communicator* group, std::ostream& log,
                              FlightRecorder* recorder, const RankRecovery& recovery = {});

}  // namespace px
