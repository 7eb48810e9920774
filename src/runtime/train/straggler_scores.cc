#include "runtime/train/straggler_scores.h"

#include <algorithm>
#include <numeric>
#include <string>

#include <nlohmann/json.hpp>

namespace px {

StragglerScores::StragglerScores(int ranks, double threshold)
    : ranks_(static_cast<size_t>(ranks)), threshold_(threshold) {}

double StragglerScores::recent_mean(const Rank& r) const {
  if (r.recent.empty()) return 0;
  return std::accumulate(r.recent.begin(), r.recent.end(), 0.0) / static_cast<double>(r.recent.size());
}

double StragglerScores::fastest() const {
  double best = 0;
  for (const Rank& r : ranks_)
    if (r.live && !r.recent.empty()) best = best == 0 ? recent_mean(r) : std::min(best, recent_mean(r));
  return best;
}

double StragglerScores::score(int rank) const {
  const double least = fastest();
  const Rank& r = ranks_[static_cast<size_t>(rank)];
  return least > 0 && !r.recent.empty() ? recent_mean(r) / least : 1.0;
}

double StragglerScores::vs_best(int rank) const {
  const Rank& r = ranks_[static_cast<size_t>(rank)];
  return r.best > 0 ? recent_mean(r) / r.best : 1.0;
}

std::optional<StragglerChange> StragglerScores::record(int rank, double seconds, double wait_seconds) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  r.recent.push_back(seconds);
  if (static_cast<int>(r.recent.size()) > kRecentSteps) r.recent.pop_front();
  r.compute_s += seconds;
  r.wait_s += wait_seconds;
  ++r.steps;
  if (static_cast<int>(r.recent.size()) == kRecentSteps)
    r.best = r.best == 0 ? recent_mean(r) : std::min(r.best, recent_mean(r));
  const double s = score(rank);
  r.above = s > threshold_ ? r.above + 1 : 0;
  if (!r.named && r.above >= kStragglerSteps) {
    r.named = true;
    return StragglerChange{.rank = rank, .straggling = true, .score = s, .vs_best = vs_best(rank)};
  }
  if (r.named && r.above == 0) {
    r.named = false;
    return StragglerChange{.rank = rank, .straggling = false, .score = s, .vs_best = vs_best(rank)};
  }
  return std::nullopt;
}

void StragglerScores::leave(int rank) { ranks_[static_cast<size_t>(rank)].live = false; }

nlohmann::json StragglerScores::summary() const {
  nlohmann::json out = nlohmann::json::object();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const Rank& r = ranks_[i];
    if (r.steps == 0) continue;
    out[std::to_string(i)] = {{"score", score(static_cast<int>(i))},
                              {"vs_best", vs_best(static_cast<int>(i))},
                              {"compute_s", r.compute_s},
                              {"wait_s", r.wait_s},
                              {"steps", r.steps},
                              {"straggling", r.named}};
  }
  return out;
}

}  // namespace px
