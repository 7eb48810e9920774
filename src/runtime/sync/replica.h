// One rank's own copy of the model under --sync partial-reduce or gossip:
// its parameters in one flat arena (N floats, ParamStore order) that a
// one-rank gradient program reads (parallel::lower_single, one per row
// count), its own optimizer over whole parameters (so each optimizer slot
// is a flat vector in the same layout), and the averaging with a group.
//
// Averaging: each member scales its state by its weight over the group's
// total and the group allreduces the sum (ring, over a view of the round's
// members). Weights are the members' row shares, so a group of every
// replica averages what bulk-synchronous data parallelism would have: with
// plain SGD (momentum included), mean gradient g_i over b_i of B rows,
//   sum_i (b_i/B) (p - lr g_i) = p - lr sum_i (b_i/B) g_i,
// and the momenta likewise by linearity, the state of the gradient
// allreduce's step.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
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
  // `initial` holds the initial (or resumed) parameters; `resumed` the
  // checkpoint to take the optimizer state from (nullptr: fresh).
  Replica(Task& task, const ParamStore& initial, const OptimizerConfig& optimizer, Precision precision,
          const Checkpoint* resumed);
  // Forward, backward and the update on `batch` (this rank's rows of a
  // global batch, the first at `row_offset`).
  ReplicaStep step(const DataBatch& batch, uint64_t seed, int64_t row_offset, double lr, double grad_clip);
  // The members of `group` average their parameters (and, with `state`,
  // their optimizer state), this one weighing `weight` of `total`.
  void average(comm::Communicator& group, double weight, double total, bool state);
  const ParamStore& params() const { return params_; }
  // Whole parameters and optimizer slots "<param>.<slot>", copies, for a checkpoint.
  std::vector<SavedRun> state_runs() const;
  int64_t optimizer_steps() const { return optimizer_.steps(); }

 private:
  struct Program {
    nn::Model model;
    std::unique_ptr<ProgramExecutor> executor;
  };
  Program& program_for(int64_t rows);
  void average_span(comm::Communicator& group, std::span<float> values, double scale);

  Task& task_;
  Precision precision_;
  Tensor arena_;                   // (N) the parameters
  ParamStore params_;              // views of arena_
  std::vector<int64_t> offsets_;   // each tensor's first element in arena_
  Optimizer optimizer_;
  std::map<int64_t, Program> programs_;  // by rows
};

}  // namespace px::sync
