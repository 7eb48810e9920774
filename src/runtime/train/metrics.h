// The metrics file (--metrics, or <run dir>/metrics.jsonl): one JSON object
// a line, written by the lead rank as training goes. The data-parallel
// trainer and the parameter server write the same lines: a step's
// {"step", "train_loss", "lr", "time_s", ...}, an evaluation's
// {"step", "val_loss", "val_accuracy"?, "time_s"}, a restart's
// {"restart", "resumed_step", "ready_at", "saved_at"}.
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/tasks/task.h"

namespace px {

class MetricsLog {
 public:
  // An empty path writes nothing (ranks other than the lead). A resumed or
  // restarted run appends to the file.
  MetricsLog(const std::string& path, bool append);
  void write(const nlohmann::json& line);

 private:
  std::ofstream out_;
};

// An evaluation at `step`: its metrics line (the caller may add "time_s")
// and its log text, "eval at step S: val_loss L[, val_accuracy A%]".
struct EvaluationReport {
  nlohmann::json line;
  std::string text;
};
EvaluationReport report_evaluation(const Evaluation& evaluation, int64_t step);

}  // namespace px
