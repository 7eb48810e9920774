// One model replica under --sync partial-reduce or gossip: the job's
// strategy within a replica (its pipeline stages, tensor-parallel ranks and
// micro-batches; no data axis: the replicas are the data parallelism) run
// by the executor with its updates, on the replica's own ranks. Each rank
// of a replica holds its part of the model (a stage's parameters, a
// tensor-parallel shard) and its optimizer state, flat in the Program's
// layout, the same on every replica: averaging is elementwise between the
// ranks of like place in the group's replicas (SDPipe: all stages of a
// replica join its group).
//
// Averaging: each member scales its state by its weight over the group's
// total and the group allreduces the sum (ring). Weights are the members'
// row shares, so a group of every replica averages what bulk-synchronous
// data parallelism would have: with plain SGD (momentum included), mean
// gradient g_i over b_i of B rows,
//   sum_i (b_i/B) (p - lr g_i) = p - lr sum_i (b_i/B) g_i,
// and the momenta likewise by linearity, the state of the gradient
// allreduce's step. (Clipping acts on each replica's own gradient norm,
// so it breaks this equality.)
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "parallel/mesh.h"
#include "parallel/strategy.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/executor/program_executor.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/tasks/task.h"

namespace px::sync {

struct ReplicaStep {
  double loss = 0;  // mean over its rows
  int64_t rows = 0;
  int64_t peak_bytes = 0;
};

class Replica {
 public:
  // `ranks`: the replica's own (a communicator of its size; one rank: the
  // whole model, no collectives within). `request` gives the strategy
  // within it (its row shares are the replicas', ignored here); `rows` a
  // full global batch's rows of this replica. `initial` holds the initial
  // parameters whole; `resumed` the checkpoint to start from (nullptr:
  // fresh), saved under any strategy.
  Replica(Task& task, const parallel::StrategyRequest& request, const OptimizerOptions& optimizer, int64_t rows,
          comm::Communicator& ranks, const ParamStore& initial, const Checkpoint* resumed);
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Forward, backward and the update on `batch` (this replica's rows of a
  // global batch, the first at `row_offset`): collective over its ranks.
  ReplicaStep step(const DataBatch& batch, uint64_t seed, int64_t row_offset, double lr, double grad_clip);
  // The members of `group` (this rank and its like in the round's other
  // replicas) average their parameters (and, with `state`, their
  // optimizer state), this one weighing `weight` of `total`.
  void average(comm::Communicator& group, double weight, double total, bool state);
  // The whole parameters (collective over the replica's ranks).
  ParamStore whole_parameters() { return executor_->parameters(); }
  // This rank's part of a checkpoint: its runs of every parameter and
  // optimizer slot, and where they sit in the replica's mesh.
  CheckpointPart checkpoint_part() const;
  int64_t optimizer_steps() const { return executor_->optimizer().steps(); }
  const parallel::Strategy& strategy() const { return strategy_; }

 private:
  Task& task_;
  parallel::StrategyRequest request_;
  parallel::Strategy strategy_;  // within the replica, its stage cuts fixed (for partial batches)
  comm::Communicator& ranks_;
  parallel::MeshGroups mesh_groups_;
  std::vector<comm::AlgorithmMenu> menus_;
  std::map<int64_t, nn::Model> models_;  // by rows: each program's graph (the feeds' ids)
  std::unique_ptr<ProgramExecutor> executor_;
};

}  // namespace px::sync
