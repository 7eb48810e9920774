#include "runtime/train/straggler_watch.h"

#include <algorithm>
#include <cmath>

#include "comm/collectives.h"
#include "parallel/row_split.h"

namespace px {

std::vector<int64_t> shares_by_rate(const std::vector<double>& rates, int64_t batch) {
  const double fastest = *std::max_element(rates.begin(), rates.end());
  std::vector<int64_t> shares;
  for (const double r : rates) shares.push_back(std::max<int64_t>(1, std::llround(1000 * r / fastest)));
  const int world = static_cast<int>(shares.size());
  for (int r = 0; r < world; ++r)  // a rank without a row of the batch gets the share of one
    while (parallel::shard_rows(batch, r, world, shares).size() == 0) shares[static_cast<size_t>(r)] += 1 + shares[static_cast<size_t>(r)] / 8;
  return shares;
}

StragglerWatch::StragglerWatch(comm::Communicator* group, double threshold, bool rebalance, std::vector<int64_t> rows,
                               int64_t batch)
    : group_(group),
      ranks_(group ? group->size() : 1),
      scores_(ranks_, threshold),
      rebalance_(rebalance),
      rows_(std::move(rows)),
      batch_(batch) {}

std::optional<StragglerWindow> StragglerWatch::step_done(double compute_seconds) {
  window_.push_back(static_cast<float>(compute_seconds));
  if (static_cast<int>(window_.size()) < kStragglerSteps || group_ == nullptr || ranks_ < 2) {
    if (static_cast<int>(window_.size()) >= kStragglerSteps) window_.clear();
    return std::nullopt;
  }
  std::vector<float> all(static_cast<size_t>(ranks_ * kStragglerSteps));
  comm::allgather(*group_, window_.data(), std::span<float>(all));
  window_.clear();
  StragglerWindow out;
  for (int s = 0; s < kStragglerSteps; ++s)
    for (int r = 0; r < ranks_; ++r)
      if (auto change = scores_.record(r, all[static_cast<size_t>(r * kStragglerSteps + s)], 0.0))
        out.changes.push_back(*change);
  bool named = false;
  for (int r = 0; r < ranks_; ++r) {
    double sum = 0;
    for (int s = 0; s < kStragglerSteps; ++s) sum += all[static_cast<size_t>(r * kStragglerSteps + s)];
    out.compute_s.push_back(sum / kStragglerSteps);
    out.scores.push_back(scores_.score(r));
    named = named || scores_.straggling(r);
  }
  named_windows_ = named ? named_windows_ + 1 : 0;
  if (rebalance_ && !asked_ && named_windows_ > kRebalanceWindows) {
    asked_ = true;
    std::vector<double> rates;
    for (int r = 0; r < ranks_; ++r)
      rates.push_back(double(rows_[static_cast<size_t>(r)]) / std::max(out.compute_s[static_cast<size_t>(r)], 1e-9));
    const std::vector<int64_t> shares = shares_by_rate(rates, batch_);
    bool moves = false;  // a split that gives every rank its rows again is no rebalance
    for (int r = 0; r < ranks_; ++r)
      moves = moves || parallel::shard_rows(batch_, r, ranks_, shares).size() != rows_[static_cast<size_t>(r)];
    if (moves) out.rebalance = shares;
  }
  return out;
}

}  // namespace px
