// `parallax train`: parses TrainOptions from flags and runs the trainer.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/local_cluster.h"
#include "cli/train_flags.h"
#include "runtime/progress.h"
#include "runtime/trainer.h"

namespace px::cli {
namespace {

// OpenMPI's launcher sets OMPI_COMM_WORLD_SIZE, MPICH's (hydra) PMI_SIZE.
bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

// Under `parallax launch` (cli/launch_command.cc): PARALLAX_RUN_DIR is the
// default run directory, and PARALLAX_ATTEMPT > 0 means a restart, which
// continues from the latest checkpoint in --save when there is one.
void apply_launch_environment(TrainOptions& o) {
  if (const char* dir = std::getenv("PARALLAX_RUN_DIR"); dir != nullptr && o.run_dir.empty()) o.run_dir = dir;
  const char* attempt = std::getenv("PARALLAX_ATTEMPT");
  if (attempt == nullptr) return;
  char* end = nullptr;
  const long k = std::strtol(attempt, &end, 10);
  if (end == attempt || *end != '\0' || k < 0) fail("PARALLAX_ATTEMPT '{}' is not an attempt number (0, 1, ...)", attempt);
  o.attempt = static_cast<int>(k);
  if (o.attempt > 0 && !o.save.empty() && std::filesystem::exists(o.save + "/state.json")) o.resume = o.save;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  auto progress = std::make_shared<std::string>("auto");
  auto inject_delay = std::make_shared<std::string>();
  auto inject_fault = std::make_shared<std::string>();
  TrainOptions& o = flags->options;
  o.threads = 2;
  CLI::App* cmd = app.add_subcommand("train", "train a model (gpt on text, mlp/cnn on Fashion-MNIST)");
  // A flag given twice takes its last value, so scripts can append overrides.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_flags(*cmd, *flags);
  cmd->add_option("--data", o.data,
                  "gpt: a text file (default: the fortunes corpus); mlp/cnn: the Fashion-MNIST IDX directory "
                  "(default /usr/share/datasets/fashion-mnist)");
  cmd->add_option("--steps", o.steps, "optimizer steps (default: gpt 3500, about five minutes on 2 cores)");
  cmd->add_option("--epochs", o.epochs, "epochs over the training set, mlp/cnn (default 2); overrides --steps");
  cmd->add_option("--optimizer", o.optimizer.kind, "sgd or adamw (default: gpt adamw, mlp/cnn sgd)");
  cmd->add_option("--lr", o.schedule.lr, "peak learning rate (default: gpt 1e-3, mlp/cnn 0.05)");
  cmd->add_option("--lr-schedule", o.schedule.kind, "learning-rate schedule: cosine (decays to --min-lr-ratio) or constant")->capture_default_str();
  cmd->add_option("--warmup", o.schedule.warmup, "linear warmup steps (default: gpt 100, mlp/cnn 0)");
  cmd->add_option("--min-lr-ratio", o.schedule.min_ratio, "cosine floor as a fraction of --lr (default: gpt 0.1, mlp/cnn 0)");
  cmd->add_option("--weight-decay", o.optimizer.weight_decay, "decay of weight matrices (default: gpt 0.1, cnn 5e-4, mlp 0)");
  cmd->add_option("--momentum", o.optimizer.momentum, "sgd momentum")->capture_default_str();
  cmd->add_option("--beta1", o.optimizer.beta1, "adamw beta1")->capture_default_str();
  cmd->add_option("--beta2", o.optimizer.beta2, "adamw beta2")->capture_default_str();
  cmd->add_option("--grad-clip", o.grad_clip, "clip the global gradient norm, 0 = off (default: gpt 1, mlp/cnn 0)");
  cmd->add_option("--eval-every", o.eval_every, "evaluate every N steps, 0 = at the end (default: gpt 500, mlp/cnn 0)");
  cmd->add_option("--eval-batches", o.eval_batches, "gpt: validation batches per evaluation")->capture_default_str();
  cmd->add_option("--threads", o.threads, "threads for kernels and BLAS (per MPI rank; in-process ranks use 1 each)")
      ->capture_default_str();
  add_parallel_flags(*cmd, *flags);
  cmd->add_option("--link-gbps", o.link_gbps, "in-process ranks: limit each rank's link to X Gb/s (0: unlimited)")
      ->capture_default_str();
  cmd->add_option("--inject-delay", *inject_delay, "RANK:MS - that rank sleeps MS milliseconds before every step (a straggler)");
  cmd->add_option("--inject-fault", *inject_fault,
                  "RANK:STEP[:kill|hang|lost] - that rank dies (kill, the default), freezes (hang) or dies for good "
                  "(lost: a restart continues without it) at the start of step STEP, on the first attempt only; for "
                  "demonstrations and tests of failure detection and restarts");
  cmd->add_option("--timeout", o.timeout_s,
                  "seconds: every wait fails after this long, and a rank silent this long is named by every other")
      ->capture_default_str();
  cmd->add_option("--run-dir", o.run_dir,
                  "directory for the run's flight records (flight/rank<R>), which `parallax doctor` reads after a "
                  "failure (default under parallax launch: its run directory)")
      ->capture_default_str();
  cmd->add_option("--inject-nan", o.inject_nan_steps,
                  "STEP[,STEP...] - the batch each of these steps draws first is made non-finite, every time it "
                  "runs (a bad record: the step is skipped, retried once, then the batch is skipped for good)")
      ->delimiter(',');
  cmd->add_option("--skip-batches", o.skip_batches,
                  "N[,N...] - never train on these batches (numbered from 1 in the order drawn; a checkpoint "
                  "remembers the ones that failed twice)")
      ->delimiter(',');
  cmd->add_option("--ps", o.ps.mode, "parameter-server training instead of data parallelism: bsp (synchronous), "
                                     "asp (asynchronous) or ssp (stale-synchronous, see --staleness); ranks "
                                     "0..K-1 serve, the rest are workers")
      ->check(CLI::IsMember({"bsp", "asp", "ssp"}));
  cmd->add_option("--ps-servers", o.ps.servers, "--ps: K server ranks, each holding 1/K of the parameters")
      ->capture_default_str();
  cmd->add_option("--staleness", o.ps.staleness, "--ps ssp: a worker may run at most this many steps ahead of the "
                                                 "slowest")
      ->capture_default_str();
  cmd->add_option("--backup-workers", o.ps.backup_workers, "--ps bsp: each step's update takes the first W-B "
                                                          "of the W workers' gradients to arrive and drops the rest "
                                                          "(stragglers)")
      ->capture_default_str();
  cmd->add_option("--metrics", o.metrics, "write JSON lines (step, train_loss, val_loss, val_accuracy) here");
  cmd->add_option("--trace", o.trace, "write a Chrome trace (Perfetto) of steps 2-4: compute and communication per rank");
  cmd->add_option("--save", o.save, "checkpoint directory (written atomically)");
  cmd->add_option("--save-every", o.save_every,
                  "checkpoint every N steps, written in the background (0: only at the end); with --max-restarts "
                  "also an in-memory snapshot, copied to a buddy rank")
      ->capture_default_str();
  cmd->add_option("--keep-last", o.keep_last,
                  "checkpoints to keep: the latest in --save, the older ones beside it as <save>.step-<S>")
      ->capture_default_str();
  cmd->add_option("--max-restarts", o.max_restarts,
                  "in-process ranks: restart a failed job up to N times, from the in-memory snapshots (a lost "
                  "rank's from its buddy), else the latest checkpoint (under mpirun use parallax launch)")
      ->capture_default_str();
  cmd->add_option("--min-ranks", o.min_ranks,
                  "with --max-restarts: continue with fewer ranks, down to K, when a rank is lost for good (0: "
                  "never fewer)")
      ->capture_default_str();
  cmd->add_option("--resume", o.resume, "continue from this checkpoint directory (repeat the other flags)");
  cmd->add_option("--stop-after", o.stop_after, "end and save after this step, as if preempted (0: off)");
  cmd->add_option("--sample-tokens", o.sample_tokens, "gpt: bytes of text to generate at the end (default 300)");
  cmd->add_option("--prompt", o.prompt, "gpt: text the sample continues (default: a newline)");
  o.local_cluster = local_cluster_path();
  cmd->add_flag("--no-predict", [&o](int64_t) { o.local_cluster.clear(); },
                "skip the predicted vs measured step time and memory printed at the end");
  cmd->add_option("--progress", *progress, "auto (a bar on a terminal), bar or lines")
      ->check(CLI::IsMember({"auto", "bar", "lines"}))
      ->capture_default_str();
  cmd->callback([flags, progress, inject_delay, inject_fault] {
    apply(*flags);
    TrainOptions o = flags->options;
    if (!inject_delay->empty()) {
      int rank = -1;
      long long ms = -1;
      char tail = 0;
      if (std::sscanf(inject_delay->c_str(), "%d:%lld%c", &rank, &ms, &tail) != 2 || rank < 0 || ms < 0)
        fail("--inject-delay '{}' is not RANK:MS (e.g. 1:200)", *inject_delay);
      o.inject_delay_rank = rank;
      o.inject_delay_ms = ms;
    }
    if (!inject_fault->empty()) {
      int rank = -1;
      long long step = 0;
      char mode[16] = "kill";
      const int n = std::sscanf(inject_fault->c_str(), "%d:%lld:%15s", &rank, &step, mode);
      if (n < 2 || rank < 0 || step < 1)
        fail("--inject-fault '{}' is not RANK:STEP[:kill|hang|lost] (e.g. 2:37:kill)", *inject_fault);
      o.inject_fault_rank = rank;
      o.inject_fault_step = step;
      o.inject_fault_mode = mode;
    }
    // In-process ranks are the parallelism: each runs its kernels on its own thread.
    if (o.ranks > 1) o.threads = 1;
    o.progress_bar = *progress == "bar" || (*progress == "auto" && stdout_is_terminal());
    o.mpi = launched_by_mpi();
    // The ranks on this node (the memory guard's share of the machine):
    // OpenMPI's OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS.
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
      if (const char* value = std::getenv(name); value != nullptr && o.local_ranks == 0) o.local_ranks = std::atoi(value);
    if (const char* bound = std::getenv("PARALLAX_MPI_TAG_UB")) o.mpi_tag_bound = std::atoi(bound);
    apply_launch_environment(o);
    train(o, std::cout);
  });
}

}  // namespace px::cli
