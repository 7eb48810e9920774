// What a run directory (`parallax train --run-dir DIR`) keeps besides its
// metrics, for `parallax report` (report/run_directory.h): the strategy
// when the run starts (strategy.json, which --strategy takes back) and,
// when it ends, run.json: the model, the mesh, the figures measured and
// predicted per rank, the strategy's placements and its schedule, and the
// simulator's replay of one step beside which the measured trace is drawn.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/program.h"
#include "parallel/strategy.h"
#include "runtime/train/prediction.h"
#include "runtime/train/trainer.h"

namespace px {

struct RunFigures {
  std::string unit;            // what a row is for throughput: "tok" or "img"
  int64_t units_per_step = 0;  // rows × units per row
  int threads = 1;             // a lone rank's kernel threads
  std::vector<int64_t> measured_peak_bytes;  // every rank's peak tensor memory
  const RunPrediction* prediction = nullptr;  // null: the run made none (--no-predict)
};

// The strategy's parameters (the first program that holds each, in
// `programs`, every rank's), their whole shapes and placements per axis.
nlohmann::json placement_summary(const parallel::Strategy& strategy, const std::vector<parallel::Program>& programs);

// The schedule each pipeline stage runs, with unit costs (forward 1,
// backward 2): the program's pipeline schedule, or without a pipeline one
// stage's forward and backward per micro-batch.
nlohmann::json schedule_summary(const parallel::Strategy& strategy, const parallel::Program& program);

// run.json's contents.
nlohmann::json run_summary(const nn::ModelConfig& model, const DataOptions& data, const parallel::Strategy& strategy,
                           const std::vector<parallel::Program>& programs, const DataParallelResult& result,
                           const RunFigures& figures);

// Writes <dir>/strategy.json (atomically).
void write_run_strategy(const std::string& dir, const parallel::Strategy& strategy);
// Writes <dir>/run.json (atomically).
void write_run_summary(const std::string& dir, const nlohmann::json& summary);

}  // namespace px
