// Straggler scores: each rank's recent step time (its compute, not its
// waits) against the fastest rank's and against its own best. A rank whose
// score stays above the threshold for kStragglerSteps of its steps in a row
// is named; one named that comes back under it is named recovered.
//   score     = recent_i / min_j recent_j   (1: as fast as the fastest)
//   vs_best   = recent_i / best_i           (1: as fast as it ever was)
// recent is the mean of the rank's last kRecentSteps step times; best the
// least such mean it had.
#pragma once

#include <deque>
#include <optional>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace px {

constexpr int kStragglerSteps = 5;
constexpr int kRecentSteps = 5;

struct StragglerChange {
  int rank = 0;
  bool straggling = false;  // named now (true) or recovered (false)
  double score = 0, vs_best = 0;
};

class StragglerScores {
 public:
  StragglerScores(int ranks, double threshold);
  // Rank `rank` finished a step that computed for `seconds` and waited
  // `wait_seconds` (for its group and the averaging) after the one before.
  // Returns a change in whether it is named.
  std::optional<StragglerChange> record(int rank, double seconds, double wait_seconds);
  void leave(int rank);
  double score(int rank) const;
  double vs_best(int rank) const;
  bool straggling(int rank) const { return ranks_[static_cast<size_t>(rank)].named; }
  // {"<rank>": {"score", "vs_best", "compute_s", "wait_s", "steps"}} for the metrics and the report.
  nlohmann::json summary() const;

 private:
  struct Rank {
    std::deque<double> recent;
    double best = 0;  // 0: none yet
    double compute_s = 0, wait_s = 0;  // totals
    int64_t steps = 0;
    int above = 0;  // consecutive steps above the threshold
    bool named = false, live = true;
  };
  double recent_mean(const Rank& r) const;
  double fastest() const;
  std::vector<Rank> ranks_;
  double threshold_;
};

}  // namespace px
