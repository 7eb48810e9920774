// Parameter-server training (docs/parameter_server.md): a runtime mode beside
// the data-parallel trainer. Ranks 0..K-1 serve contiguous shards of the
// flat parameters and their optimizer state; the other ranks are workers
// that pull parameters, compute gradients on their shard of each global
// batch and push them. Modes bsp, asp and ssp (staleness bound s) decide
// when a pull may be answered and when gradients are applied.
#pragma once

#include <ostream>

#include "comm/communicator.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/fault/fault_options.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/parameter_server/ps_options.h"
#include "runtime/tasks/task.h"
#include "runtime/train/run_options.h"
#include "runtime/train/run_report.h"

namespace px {

// A parameter-server run's own figures beside the common report.
struct ParameterServerReport {
  int64_t max_staleness = 0;            // the most clocks a worker's parameters lagged behind
  std::vector<int64_t> dropped_pushes;  // bsp: per worker, gradients left out of their step's update
  std::vector<int> gradients_per_update;  // bsp: per step, the workers' gradients its update summed
};

struct ParameterServerResult {
  RunReport run;
  ParameterServerReport parameter_server;
};

// Run by every rank of `world` (ps.mode set), from the parts of the job its
// rooms own, the workers computing in `precision` (the run's). Rank 0 (server 0) writes the log, the metrics (the global
// batch's loss per step, as the rows-weighted sum of the workers' losses of
// that clock), evaluates the gathered parameters at the end and saves the
// checkpoint (normal format: any rank count can resume it, data-parallel
// too). Rank 0's result holds the losses and the largest staleness any
// worker computed with.
ParameterServerResult train_parameter_server(const nn::ModelConfig& model, const DataOptions& data,
                                             Precision precision, const OptimizerOptions& optimizer,
                                             const ParameterServerOptions& ps, const CheckpointOptions& checkpoint,
                                             const FaultOptions& fault, const RunOptions& run,
                                             comm::Communicator& world, std::ostream& log);

}  // namespace px
