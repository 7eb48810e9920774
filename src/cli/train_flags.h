// Flags `parallax train` and `parallax lower` share: the model and its
// batch, and how data parallelism is set up. Parsed into TrainFlags, then
// apply() fills the model's defaults and turns the text flags into options.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "runtime/train_options.h"

namespace px::cli {

struct TrainFlags {
  TrainOptions options;
  double bucket_mb = double(parallel::kDefaultBucketBytes) / (1 << 20);
  std::string allreduce = "auto";
  std::string compress = "none";
  double p3_slice_kb = 0;
  std::string mesh;  // "pp=2,dp=2,tp=2"
  int micro_batches = 0;  // --micro-batches (0: not given; --accumulation's number)
  std::string schedule = "1f1b";
  std::string stage_cuts;  // "h.2,h.4"
  std::string recompute = "none";
};

// Unset integer and float options take the model's default (apply()).
void add_model_flags(CLI::App& cmd, TrainFlags& flags);
void add_parallel_flags(CLI::App& cmd, TrainFlags& flags);
// After parsing: the model's defaults, then the text flags into options.
void apply(TrainFlags& flags);

}  // namespace px::cli
