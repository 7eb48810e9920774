// Synchronized-replicas training (--sync partial-reduce | gossip,
// docs/heterogeneous.md): a runtime mode beside the data-parallel trainer
// and the parameter server. Every rank steps its own copy of the model on
// its rows of successive global batches (replica.h) and averages with
// others as the mode says: partial reduce in the groups rank 0's
// coordinator forms from the ready replicas (coordinator.h), gossip with
// one partner per step from a random matching every rank draws alike.
// Evaluations, checkpoints and the end are rounds of every replica, after
// which all hold one model: rank 0 evaluates and saves it (whole tensors:
// any rank count and strategy resumes it).
//
// A replica may itself span ranks (--pp, --tp: replica.h); all its ranks
// average with their like in the group's replicas, and the coordinator
// schedules replicas (its messages go to each replica's first rank).
//
// In process, a whole-model replica other than rank 0 that dies under partial reduce
// (--inject-fault) tells the coordinator, which leaves it out of later
// rounds and names it; the others go on. Rank 0 (the coordinator's) dying,
// or any rank under MPI (no fault-tolerant MPI is assumed), is a named
// error, and a restart resumes from the last checkpoint.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "parallel/compose.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/fault/fault_options.h"
#include "runtime/fault/flight_recorder.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/sync/sync_options.h"
#include "runtime/tasks/task.h"
#include "runtime/train/run_options.h"
#include "runtime/train/run_report.h"

namespace px {

// A synchronized-replicas run's own figures beside the common report (rank 0's).
struct SyncReport {
  std::string mode;
  int64_t rounds = 0;          // partial reduce: groups formed
  double mean_group = 0;       // replicas per round
  int64_t max_staleness = 0;   // the most steps apart two members of a round were
  nlohmann::json stragglers;   // per rank: score, vs_best, compute_s, wait_s, steps (straggler_scores.h)
  std::vector<std::string> left;  // replicas that died and were left out
};

struct SyncResult {
  RunReport run;
  SyncReport sync;
};

// Run by every rank of `world` (sync.mode set). `strategy` is the split
// within a replica (--pp x --tp ranks each, consecutive; its micro-batches,
// precision) and, by its row shares, of each global batch's rows over the
// replicas (empty: evenly), which also weigh each replica's average;
// `attempt` > 0 (a restart) injects no --inject-fault.
SyncResult train_synced(const nn::ModelConfig& model, const DataOptions& data, const parallel::StrategyRequest& strategy,
                        const OptimizerOptions& optimizer,
                        const SyncOptions& sync, const CheckpointOptions& checkpoint, const FaultOptions& fault,
                        const RunOptions& run, int attempt, comm::Communicator& world, std::ostream& log,
                        FlightRecorder& recorder);

}  // namespace px
