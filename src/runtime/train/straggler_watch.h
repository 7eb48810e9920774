// Straggler scores in a data-parallel run. Every rank keeps its applied
// steps' compute (StepResult::compute_us: its own kernels and local passes,
// its waits left out); every kStragglerSteps steps the ranks allgather
// those few floats, so every rank holds the same StragglerScores and
// reaches the same verdicts with no further message. The lead writes them
// (the trainer's report_stragglers).
//
// With rebalancing (`parallax launch --rebalance`), a rank named a
// straggler and still named kRebalanceWindows windows later makes the
// window ask for a rebalance: the trainer ends there with a checkpoint,
// and the launcher restarts it with rows in proportion to the measured
// rates (rows / compute second), in thousandths of the fastest rank's.
#pragma once

#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "runtime/train/straggler_scores.h"

namespace px {

constexpr int kRebalanceWindows = 2;
// `parallax train`'s exit status when it ended to be rebalanced (EX_TEMPFAIL):
// `parallax launch --rebalance` restarts it with <run dir>/rebalance.json's rows.
constexpr int kRebalanceExitCode = 75;

struct StragglerWindow {
  std::vector<double> compute_s;  // per rank: its mean step compute over the window
  std::vector<double> scores;     // per rank (StragglerScores::score)
  std::vector<StragglerChange> changes;
  // Rebalancing asked for: the row shares the measured rates give.
  std::optional<std::vector<int64_t>> rebalance;
};

class StragglerWatch {
 public:
  // `rows` is each rank's rows of a full `batch` (the rates' numerators).
  StragglerWatch(comm::Communicator* group, double threshold, bool rebalance, std::vector<int64_t> rows,
                 int64_t batch);
  // After each applied step (collective every kStragglerSteps calls):
  // the window's figures when one closed.
  std::optional<StragglerWindow> step_done(double compute_seconds);
  nlohmann::json summary() const { return scores_.summary(); }

 private:
  comm::Communicator* group_;
  int ranks_;
  StragglerScores scores_;
  bool rebalance_;
  std::vector<int64_t> rows_;
  int64_t batch_;
  std::vector<float> window_;  // this rank's, this window
  int named_windows_ = 0;      // windows in a row with a rank named
  bool asked_ = false;
};

// Rows of a `batch` in proportion to `rates` (rows per second), in
// thousandths of the fastest, raised where a rank would get no row.
std::vector<int64_t> shares_by_rate(const std::vector<double>& rates, int64_t batch);

}  // namespace px
