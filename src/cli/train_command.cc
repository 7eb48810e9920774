// `parallax train`: parses JobSpec from flags and runs the trainer.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/local_cluster.h"
#include "cli/train_flags.h"
#include "core/atomic_file.h"
#include "runtime/train/progress.h"
#include "runtime/launch/launch.h"
#include "runtime/train/straggler_watch.h"

namespace px::cli {
namespace {

// Under `parallax launch` (cli/launch_command.cc): PARALLAX_RUN_DIR is the
// default run directory, and PARALLAX_ATTEMPT > 0 means a restart, which
// continues from the latest checkpoint in --save when there is one.
void apply_launch_environment(JobSpec& o) {
  if (const char* dir = std::getenv("PARALLAX_RUN_DIR"); dir != nullptr && o.fault.run_dir.empty()) o.fault.run_dir = dir;
  if (const char* rebalance = std::getenv("PARALLAX_REBALANCE"); rebalance != nullptr && std::string(rebalance) == "1")
    o.run.rebalance = true;
  const char* attempt = std::getenv("PARALLAX_ATTEMPT");
  if (attempt == nullptr) return;
  char* end = nullptr;
  const long k = std::strtol(attempt, &end, 10);
  if (end == attempt || *end != '\0' || k < 0) fail("PARALLAX_ATTEMPT '{}' is not an attempt number (0, 1, ...)", attempt);
  o.launch.attempt = static_cast<int>(k);
  // Whether there is one is agreed by the ranks (each host may have its
  // own disk, and one may have committed a save another has not).
  if (o.launch.attempt > 0 && !o.checkpoint.save.empty()) {
    o.checkpoint.resume = o.checkpoint.save;
    o.checkpoint.resume_if_saved = true;
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  JobSpec& o = flags->job;
  o.run.threads = 2;
  o.run.local_cluster = local_cluster_path();
  CLI::App* cmd = app.add_subcommand("train", "train a model (gpt on text, mlp/cnn on Fashion-MNIST)");
  // A flag given twice takes its last value, so scripts can append overrides.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_train_flags(*cmd, *flags);
  cmd->callback([flags] {
    apply(*flags);
    JobSpec o = flags->job;
    o.launch.mpi = launched_by_mpi();
    // In-process ranks are the parallelism: each runs its kernels on its own
    // thread (a --mesh or strategy file's ranks too, unless MPI's processes are the ranks).
    if (o.launch.ranks > 1 || (!o.launch.mpi && o.strategy.mesh_ranks > 1)) o.run.threads = 1;
    o.run.progress_bar = flags->progress == "bar" || (flags->progress == "auto" && stdout_is_terminal());
    // The ranks on this node (the memory guard's share of the machine):
    // OpenMPI's OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS.
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
      if (const char* value = std::getenv(name); value != nullptr && o.launch.local_ranks == 0) o.launch.local_ranks = std::atoi(value);
    if (const char* bound = std::getenv("PARALLAX_MPI_TAG_UB")) o.launch.mpi_tag_bound = std::atoi(bound);
    o.launch.mpi_pmi_fd = launcher_pmi_fd();
    apply_launch_environment(o);
    // An output path may name directories that do not exist yet: the files
    // written atomically (trace, checkpoints, run summaries) make theirs,
    // the metrics' stream is opened plainly.
    if (!o.run.metrics.empty()) create_parent_directories(o.run.metrics);
    const JobResult result = train(o, std::cout);
    // Ended to be rebalanced: `parallax launch --rebalance` restarts it split by the measured rates.
    if (result.data_parallel && result.data_parallel->rebalance) {
      std::cout.flush();
      std::exit(kRebalanceExitCode);
    }
  });
}

}  // namespace px::cli
