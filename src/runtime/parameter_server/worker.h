// A parameter-server worker: per clock c it pulls every server's shard of
// the parameters (the servers' gate decides how stale they may be), runs
// forward and backward on its rows of global batch c with a single-device
// CompiledModel, and pushes each server its shard of the gradient.
//
// Update scaling: the worker's gradient is the mean over its b rows, sent
// multiplied by b / B (B = the global batch), so the W pushes of a clock sum
// to the gradient of the global batch's loss (what one rank computes on all
// B rows). Clipping (--grad-clip) applies to the worker's mean gradient.
#pragma once

#include <map>
#include <memory>

#include "comm/communicator.h"
#include "runtime/compiled_model.h"
#include "runtime/parameter_server/protocol.h"
#include "runtime/task.h"

namespace px::ps {

struct WorkerConfig {
  int64_t start_clock = 0;
  int64_t end_clock = 0;
  int64_t global_batch = 1;  // B
  double grad_clip = 0;
  uint64_t seed = 1;         // the job's seed (dropout masks per clock, as the data-parallel trainer draws them)
  int slow_ms = 0;           // tests: sleep this long before each step
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
  void pull(int64_t clock);
  // Computes and pushes the weighted gradient of clock `clock`.
  void compute_and_push(int64_t clock);
  CompiledModel& model_for(int64_t rows);

  comm::Communicator& comm_;
  Layout layout_;
  int worker_;
  Task& task_;
  ParamStore& params_;
  WorkerConfig config_;
  std::vector<int64_t> offsets_;  // each tensor's offset in the flat vector
  Tensor arena_;                  // (N) parameters as pulled
  std::vector<float> gradient_;   // (N) weighted gradient being pushed
  PushHeader push_header_;
  std::vector<comm::Request> push_sends_;
  std::map<int64_t, std::unique_ptr<CompiledModel>> models_;  // by rows
  WorkerStats stats_;
};

}  // namespace px::ps
