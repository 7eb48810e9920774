// Progress of a long run: on a terminal, a bar redrawn in place with loss,
// throughput and ETA; otherwise plain lines every ~5% of the run (or 30 s).
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace px {

class Progress {
 public:
  Progress(int64_t total_steps, int64_t start_step, std::string unit, bool bar, std::ostream& out);
  // After step `step` (1-based count done), with `units` processed by it.
  void update(int64_t step, double loss, int64_t units);
  // Prints a line that must not be overwritten (evaluations).
  void message(const std::string& line);
  void finish();
  double elapsed_seconds() const;

 private:
  std::string status(int64_t step, double loss) const;
  int64_t total_, start_;
  std::string unit_;
  bool bar_;
  std::ostream& out_;
  std::chrono::steady_clock::time_point begin_, last_line_;
  double units_ = 0;
  int64_t last_step_ = 0;
  bool dirty_ = false;
};

bool stdout_is_terminal();

}  // namespace px
