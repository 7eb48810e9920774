// A run directory, as `parallax train --run-dir DIR` leaves it, read back
// for the report (docs/report.md):
//
//   metrics.jsonl   every step's and evaluation's JSON line (required)
//   run.json        the run's summary, written when it ends (runtime/train/run_summary.h)
//   strategy.json   the strategy it ran (parallax train --strategy takes it)
//   trace.json      a Chrome trace of steps 2-4, every rank
//   plan.json       how `parallax plan --explain` chose the strategy, when it did
//   flight/         flight records (parallax doctor)
//
// or, as `parallax serve --run-dir DIR` leaves it (serve/run_log.h), a
// serving run: serve.jsonl (required) and serve.json; its element has
// "kind": "serve", "serving" (the lines) and "summary".
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace px::report {

// The run at `dir` as the report's data (one element of "runs"), with
// links relative to `html_dir`, the directory the report is written to.
// px::Error naming the file and line when something is unreadable, or
// the directory when it holds no metrics.
nlohmann::json read_run_directory(const std::string& dir, const std::string& html_dir);

// The run's headline figures as a few lines for the terminal: the
// strategy, predicted vs measured step time and each rank's peak memory.
std::string describe_run(const nlohmann::json& run);

}  // namespace px::report
