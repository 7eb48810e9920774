// A parameter-server worker: per clock c it pulls every server's shard of
// the parameters (the servers' gate decides how stale they may be), runs
// forward and backward on its rows of global batch c with a one-rank
// program without updates (parallel::lower_single), and pushes each server
// its shard of the gradient.
//
// bsp: the pull answers where the servers are. A worker that fell behind
// (with backup workers its pushes came too late and the clocks went on)
// continues at the servers' clock, skipping the global batches it missed so
// that it keeps reading its shard of the same global batch as the others;
// when every clock is applied it stops.
//
// Update scaling: the worker's gradient is the mean over its b rows, sent
// multiplied by b / B (B = the global batch), so the W pushes of a clock sum
// to the gradient of the global batch's loss (what one rank computes on all
// B rows). Clipping (--grad-clip) applies to the worker's mean gradient: the
// Program's Norm and Clip, as in every other training program.
#pragma once

#include <map>
#include <memory>

#include "comm/communicator.h"
#include "runtime/executor/program_executor.h"
#include "runtime/parameter_server/protocol.h"
#include "runtime/tasks/task.h"

namespace px::ps {

struct WorkerConfig {
  int64_t start_clock = 0;
  int64_t end_clock = 0;
  double grad_clip = 0;
  uint64_t seed = 1;         // the job's seed (dropout masks per clock, as the data-parallel trainer draws them)
  bool bsp = false;          // continue at the servers' clock after each pull (and so skip batches)
  int64_t delay_ms = 0;      // a straggler (--inject-delay): sleep this long before each step's compute
  Precision precision = Precision::fp32;  // the run's (--precision)
};

struct WorkerStats {
  int64_t max_staleness = 0;  // max over pulls of c - (clocks complete on the stalest server)
  int64_t peak_tensor_bytes = 0;
};

class Worker {
 public:
  // `params` is rebound to views of one flat arena that pulls land in.
  Worker(comm::Communicator& comm, const Layout& layout, Task& task, ParamStore& params, WorkerConfig config);
  WorkerStats run();

 private:
  // Pulls every server's shard for `clock` and returns the clock to compute:
  // `clock`, or in bsp the servers' clock (>= clock; all shards agree on it).
  int64_t pull(int64_t clock);
  // Pulls the shards of `servers` for clock `clock` into the arena; their
  // complete clocks go to complete[j].
  void pull_from(const std::vector<int>& servers, int64_t clock, std::vector<int64_t>& complete);
  // Draws (and drops) this worker's shards of global batches up to `clock`.
  void skip_batches_until(int64_t clock);
  // Computes and pushes the weighted gradient of clock `clock`.
  void compute_and_push(int64_t clock);
  // A one-rank gradient program per batch size (the last batch of an epoch may be short).
  struct Gradients {
    nn::Model model;
    std::unique_ptr<ProgramExecutor> executor;
  };
  Gradients& gradients_for(int64_t rows);

  comm::Communicator& comm_;
  Layout layout_;
  int worker_;
  Task& task_;
  ParamStore& params_;
  WorkerConfig config_;
  std::vector<int64_t> offsets_;  // each tensor's offset in the flat vector
  Tensor arena_;                  // (N) parameters as pulled
  std::vector<float> gradient_;   // (N) weighted gradient being pushed
  WorkerHeader push_header_;
  std::vector<comm::Request> push_sends_;
  std::map<int64_t, Gradients> programs_;  // by rows
  WorkerStats stats_;
  int64_t next_batch_clock_ = 0;  // the clock whose batch task_.next_batch returns next
};

}  // namespace px::ps
