// A whole job as `parallax train` describes it: each part owned and checked
// by its room (the model by nn, the data by tasks, the strategy by
// parallel, the optimizer, checkpoints, faults, parameter servers, the run
// by train, the ranks by launch), and the rules that tie parts together in
// one place, validate_job. The CLI fills one from flags; the launcher hands
// each room its part.
#pragma once

#include <cstdint>
#include <limits>

#include "nn/build_model.h"
#include "parallel/compose.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/fault/fault_options.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/parameter_server/ps_options.h"
#include "runtime/sync/sync_options.h"
#include "runtime/tasks/task.h"
#include "runtime/train/run_options.h"

namespace px {

// The job's ranks and how a failed job restarts: the launch room's part.
struct LaunchOptions {
  int ranks = 1;           // data-parallel ranks in this process (under mpirun: the MPI world)
  bool mpi = false;        // launched by mpirun/mpiexec (the CLI tells): the ranks are the MPI processes
  int local_ranks = 0;     // under MPI: the ranks on this machine, as the launcher tells (0: unknown)
  int mpi_tag_bound = 0;   // under MPI: use at most this tag range (0: the library's; tests)
  int mpi_pmi_fd = -1;     // under a PMI launcher: its PMI_FD (comm::mpi::MpiOptions::pmi_fd)
  double link_gbps = 0;    // in-process ranks: each rank's link limited to this many Gb/s (0: off)
  // Restarts (docs/fault_tolerance.md): in process, a failed job restarts
  // up to this many times from the latest snapshot in memory (a buddy
  // rank's copy of a lost rank's state), else the latest checkpoint.
  int max_restarts = 0;
  int min_ranks = 0;       // a restart may continue with fewer ranks, down to this many (0: the same count)
  int attempt = 0;         // this run's attempt: 0 first, k after k restarts (parallax launch sets it)
  bool operator==(const LaunchOptions&) const = default;
};

struct JobSpec {
  nn::ModelConfig model;              // mlp | cnn | gpt | FILE.onnx and its sizes
  DataOptions data;
  parallel::StrategyRequest strategy;  // its parts and precision (parallel::compose), or a --strategy file whole
  OptimizerOptions optimizer;
  CheckpointOptions checkpoint;
  FaultOptions fault;
  ParameterServerOptions ps;          // parameter-server mode instead of data parallelism
  SyncOptions sync;                   // synchronized replicas instead of a gradient allreduce
  RunOptions run;
  LaunchOptions launch;
  bool operator==(const JobSpec&) const = default;
};

// Checks every part with its room's validate and then the rules between
// parts (the mesh against the ranks and the batch, parameter servers
// against pipelines, tensor parallelism and bad steps, outputs a save
// would replace); throws px::Error naming the bad option and value.
void validate_job(const JobSpec& job);

// "Use the model's default" for integer options (floats use NaN).
inline constexpr int64_t kModelDefault = std::numeric_limits<int64_t>::min();

// Fills the fields left at their "model default" sentinel (kModelDefault,
// NaN, empty optimizer kind): gpt trains 3500 steps of batch 16 with
// AdamW lr 1e-3, warmup 100, cosine decay, weight decay 0.1, clip 1.0;
// mlp/cnn train 2 epochs of batch 64 with SGD momentum 0.9, lr 0.05 (scaled
// by batch/64 below batch 64), cosine.
void apply_model_defaults(JobSpec& job);

}  // namespace px
