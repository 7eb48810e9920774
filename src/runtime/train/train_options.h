// Everything `parallax train` is told, as one plain struct: parsed once by
// the CLI, validated here, saved in every checkpoint (so --resume knows the
// model and data it continues).
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/build_model.h"
#include "comm/collectives.h"
#include "comm/compression/spec.h"
#include "parallel/compose.h"
#include "runtime/fault/fault_injection.h"
#include "runtime/optimizer/lr_schedule.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/tasks/task.h"

namespace px {

// Parameter-server training (docs/parameter_server.md): ranks 0..servers-1
// hold the parameters and optimizer state in contiguous shards; the other
// ranks are workers. mode "" trains data-parallel instead.
struct ParameterServerOptions {
  std::string mode;            // "" (off), bsp, asp or ssp
  int servers = 1;             // K shards, one per server rank
  int staleness = 0;           // ssp: bound s on how many clocks a worker may run ahead of the slowest
  int backup_workers = 0;      // bsp: b; each update takes the first W - b gradients of its clock, drops the rest
  int late_worker = -1;        // tests: server 0 takes this worker's pushes as arriving after every other's
  bool operator==(const ParameterServerOptions&) const = default;
};

// "Use the model's default" for integer options (floats use NaN).
inline constexpr int64_t kModelDefault = std::numeric_limits<int64_t>::min();

// --wait-timeout's default, as a multiple of --timeout: far enough past the
// watchdog's verdict (the timeout and two of its periods) that a wait begun
// well before its peer fell silent still hears the verdict first.
inline constexpr int kWaitTimeoutPerTimeout = 3;
// The longest --timeout or --wait-timeout a user may give (about 31 years:
// as good as none), so both stay exact in the runtime's milliseconds.
inline constexpr double kLongestTimeoutSeconds = 1e9;

struct TrainOptions {
  std::string model = "gpt";     // mlp | cnn | gpt | FILE.onnx (an imported model, docs/onnx.md)
  std::string data;              // text file (gpt) or IDX directory (mlp/cnn); empty: the default corpus
  nn::GptConfig gpt;
  nn::MlpConfig mlp;
  nn::CnnConfig cnn;
  nn::OnnxConfig onnx;           // FILE.onnx: --loss and --input NAME=ROLE (its path is `model`)
  int64_t steps = 0;             // total steps; or
  int64_t epochs = 0;            // whole epochs (classifiers)
  int64_t batch = 16;            // global batch
  // Classifiers: leave out each epoch's last batch when it is partial
  // (fewer than `batch` rows); by default it trains (PyTorch's drop_last=False).
  bool drop_last = false;
  int64_t accumulation = 1;      // micro-batches per step (batch must divide)
  OptimizerConfig optimizer;
  LrSchedule schedule;           // schedule.total is filled from steps/epochs
  double grad_clip = 0;          // global-norm clip; 0 = off
  int64_t eval_every = 0;        // steps; 0 = only at the end
  int64_t eval_batches = 20;     // validation batches (mlp/cnn: of 1000 test images)
  uint64_t seed = 1;
  int threads = 1;
  // fp32, or bf16: mixed precision (graph/precision.h). Not part of the
  // model: checkpoints stay fp32 and resume in either precision.
  std::string precision = "fp32";
  int ranks = 1;                 // data-parallel ranks in this process (under mpirun: the MPI world)
  bool mpi = false;              // launched by mpirun/mpiexec (the CLI tells): the ranks are the MPI processes
  int local_ranks = 0;           // under MPI: the ranks on this machine, as the launcher tells (0: unknown)
  int mpi_tag_bound = 0;         // under MPI: use at most this tag range (0: the library's; tests)
  int mpi_pmi_fd = -1;           // under a PMI launcher: its PMI_FD (comm::mpi::MpiOptions::pmi_fd)
  // The strategy's parts (parallel::compose turns them into a Strategy, or
  // a --strategy file gives it whole), and how it is lowered.
  parallel::StrategyRequest strategy;
  bool overlap = true;           // collectives on progress threads while compute continues (ExecutionOptions)
  double link_gbps = 0;          // in-process ranks: each rank's link limited to this many Gb/s (0: off)
  int inject_delay_rank = -1;    // fault injection: this rank sleeps inject_delay_ms before each step
  int64_t inject_delay_ms = 0;
  // Bad steps (docs/fault_tolerance.md): batches are numbered from 1 in the
  // order drawn. --skip-batches never trains on these; --inject-nan makes
  // the batch each of these steps draws first non-finite (every time it runs).
  std::vector<int64_t> skip_batches;
  std::vector<int64_t> inject_nan_steps;
  InjectedFault inject_fault;    // --inject-fault (runtime/fault/fault_injection.h), on attempt 0 only
  // Liveness (docs/fault_tolerance.md; liveness_timeouts() below): a rank
  // whose heartbeat stops for timeout_s is named by every other
  // (runtime/fault/watchdog.h); a wait that lasts wait_timeout_s fails by
  // itself, the backstop for what no heartbeat shows (a live peer that
  // never sends). 0: kWaitTimeoutPerTimeout x timeout_s.
  double timeout_s = 60;
  double wait_timeout_s = 0;
  // Where the run keeps its flight records (flight/rank<R>), for `parallax
  // doctor`. Empty: in memory only.
  std::string run_dir;
  ParameterServerOptions ps;     // parameter-server mode instead of data parallelism
  std::string metrics;           // JSON-lines file
  std::string trace;             // Chrome trace of steps 2-4 (compute and communication per rank)
  std::string save;              // checkpoint directory
  int64_t save_every = 0;        // steps (checkpoint, and in-memory snapshot with restarts); 0 = only at the end
  int keep_last = 1;             // checkpoints kept: the latest in `save`, older ones beside it as <save>.step-<S>
  // Restarts (docs/fault_tolerance.md): in process, a failed job restarts
  // up to this many times from the latest snapshot in memory (a buddy
  // rank's copy of a lost rank's state), else the latest checkpoint.
  int max_restarts = 0;
  int min_ranks = 0;             // a restart may continue with fewer ranks, down to this many (0: the same count)
  int attempt = 0;               // this run's attempt: 0 first, k after k restarts (parallax launch sets it)
  std::string resume;            // checkpoint directory to continue from
  bool resume_if_saved = false;  // `resume` may hold no checkpoint yet (a restart): start afresh then
  int64_t stop_after = 0;        // end (and save) after this step, as if preempted; 0 = off
  int64_t sample_tokens = 0;     // GPT: print a sample of this many bytes at the end
  std::string prompt = "\n";
  bool progress_bar = false;     // else plain periodic lines
  // Non-empty: end with predicted vs measured step time and memory on the
  // local spec saved here (runtime/train/prediction.h; `parallax train` sets it).
  std::string local_cluster;

  // The model these options name, for nn::build_model.
  nn::ModelConfig model_config() const {
    return {.kind = model, .gpt = gpt, .mlp = mlp, .cnn = cnn, .onnx = onnx,
            .precision = parse_precision(precision)};
  }
  // What the task (runtime/tasks/task.h) is told.
  TaskOptions task_options() const {
    return {.model = model_config(), .data = data, .batch = batch, .drop_last = drop_last,
            .eval_batches = eval_batches, .seed = seed};
  }
};

// Checks the whole config; throws px::Error naming the bad option and value.
void validate(const TrainOptions& options);

// Liveness as the runtime takes it: the watchdog's timeout, after which a
// silent rank is named (--timeout), and every wait's own (--wait-timeout,
// or kWaitTimeoutPerTimeout x --timeout), which the communicators get.
struct LivenessTimeouts {
  std::chrono::milliseconds heartbeat;
  std::chrono::milliseconds wait;
  bool operator==(const LivenessTimeouts&) const = default;
};
// The two from `options`, checked as validate() checks them (px::Error
// naming the flag): a job takes them before its ranks validate the rest.
LivenessTimeouts liveness_timeouts(const TrainOptions& options);

// The fields that define the model and data (saved with checkpoints).
nlohmann::json model_json(const TrainOptions& options);
void apply_model_json(const nlohmann::json& json, TrainOptions& options);
// Fills the fields left at their "model default" sentinel (kModelDefault,
// NaN, empty optimizer kind): gpt trains 3500 steps of batch 16 with
// AdamW lr 1e-3, warmup 100, cosine decay, weight decay 0.1, clip 1.0;
// mlp/cnn train 2 epochs of batch 64 with SGD momentum 0.9, lr 0.05 (scaled
// by batch/64 below batch 64), cosine.
void apply_model_defaults(TrainOptions& options);

}  // namespace px
