// Flags `parallax train` and `parallax lower` share: the model and its
// batch, and how data parallelism is set up. Parsed into TrainFlags, then
// apply() fills the model's defaults and turns the text flags into options.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/launch/job_spec.h"

namespace px::cli {

struct TrainFlags {
  JobSpec job;
  std::string precision = "fp32";  // --precision: fp32 or bf16 (auto where a command resolves it)
  double bucket_mb = double(parallel::kDefaultBucketBytes) / (1 << 20);
  std::string allreduce = "auto";
  std::string compress = "none";
  double p3_slice_kb = 0;
  std::string mesh;  // "pp=2,dp=2,tp=2"
  int micro_batches = 0;  // --micro-batches (0: not given; --accumulation's number)
  std::string schedule = "1f1b";
  std::string cp_method = "ring";
  std::string cp_balance = "on";
  std::string stage_cuts;  // "h.2,h.4"
  std::string row_shares;  // "3,3,3,1"
  std::string recompute = "none";
  std::string progress = "auto";  // auto, bar or lines
  std::string inject_delay;       // "RANK:MS"
  std::string inject_fault;       // "RANK:STEP[:kill|hang|lost]"
  std::vector<std::string> inputs;  // --input NAME=ROLE (an .onnx model's input bindings)
  CLI::Option* ranks_flag = nullptr;  // --ranks, to tell whether it was given
  CLI::Option* precision_flag = nullptr;  // --precision, to tell whether it was given
};

// What every parallax command line shares, set on the top-level app before
// its subcommands are added (they inherit it): a flag takes no value
// (`--no-overlap=x` is a named parse error; CLI11 2.1 would otherwise throw
// std::invalid_argument from stoll).
void set_parser_conventions(CLI::App& app);

// Started by mpirun or mpiexec: OpenMPI's launcher sets
// OMPI_COMM_WORLD_SIZE, MPICH's (hydra) PMI_SIZE.
bool launched_by_mpi();
// The PMI-1 socket MPICH's hydra gives each process (PMI_FD), -1 without one.
int launcher_pmi_fd();

// Unset integer and float options take the model's default (apply()).
void add_model_flags(CLI::App& cmd, TrainFlags& flags);
void add_parallel_flags(CLI::App& cmd, TrainFlags& flags);
// --precision into `precision`: fp32 or bf16, the same words and meaning on
// every command; with `auto_help` (simulate and plan, which resolve it
// against the cluster: cli/precision_choice.h) auto too, so described.
CLI::Option* add_precision_option(CLI::App& cmd, std::string& precision, const std::string& auto_help = "");
// Every flag of `parallax train`: the two above and the run's own (steps,
// optimizer, checkpoints, restarts, injected faults, outputs).
void add_train_flags(CLI::App& cmd, TrainFlags& flags);
// After parsing: the model's defaults, then the text flags into options. A
// --strategy file names its ranks: without --ranks they are the job's
// (mesh_ranks; in-process, that many threads; under mpirun the processes
// must match it). A strategy file that records a precision sets
// the request's precision; a --precision given that says otherwise is an error
// naming both.
void apply(TrainFlags& flags);

}  // namespace px::cli
