// Rank 0's outputs in a synchronized-replicas job: the log, the metrics
// file and the progress line, written by two threads (the coordinator's
// rounds, the replica's evaluations), one line at a time.
#pragma once

#include <mutex>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/train/metrics.h"
#include "runtime/train/progress.h"

namespace px::sync {

class LeadOutput {
 public:
  LeadOutput(const std::string& metrics, bool append, int64_t total, int64_t start, const std::string& unit,
             bool bar, std::ostream& log)
      : log_(log), metrics_(metrics, append), progress_(total, start, unit, bar, log) {}
  void write(nlohmann::json line) {
    std::lock_guard lock(mutex_);
    line["time_s"] = progress_.elapsed_seconds();
    metrics_.write(line);
  }
  // A line that stays (not the progress line's).
  void say(const std::string& text) {
    std::lock_guard lock(mutex_);
    progress_.message(text);
  }
  void progress(int64_t step, double loss, int64_t units) {
    std::lock_guard lock(mutex_);
    progress_.update(step, loss, units);
  }
  double elapsed_seconds() {
    std::lock_guard lock(mutex_);
    return progress_.elapsed_seconds();
  }
  void finish() {
    std::lock_guard lock(mutex_);
    progress_.finish();
  }

 private:
  std::mutex mutex_;
  std::ostream& log_;
  MetricsLog metrics_;
  Progress progress_;
};

}  // namespace px::sync
