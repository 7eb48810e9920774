#include "runtime/sync/group_scheduler.h"

#include <algorithm>
#include <bit>
#include <climits>

#include "core/error.h"

namespace px::sync {
namespace {

// The first multiple of `every` above `step` (0: never).
int64_t boundary_after(int64_t step, int64_t every) { return every > 0 ? (step / every + 1) * every : 0; }

}  // namespace

std::vector<int> members_of(uint64_t members) {
  std::vector<int> out;
  for (int r = 0; r < 64; ++r)
    if (members >> r & 1) out.push_back(r);
  return out;
}

GroupScheduler::GroupScheduler(const SchedulerConfig& config)
    : config_(config),
      live_(static_cast<size_t>(config.ranks), true),
      ready_(static_cast<size_t>(config.ranks), false),
      steps_(static_cast<size_t>(config.ranks), config.start_step),
      version_(static_cast<size_t>(config.ranks), config.start_step),
      rows_(config.start_step * config.batch_rows),
      next_full_(boundary_after(config.start_step, config.full_every)),
      next_eval_(boundary_after(config.start_step, config.eval_every)),
      next_save_(boundary_after(config.start_step, config.save_every)) {
  PX_CHECK_GT(config.batch_rows, 0);
  stop_due_ = config.start_step >= config.end_step;
}

int GroupScheduler::live_count() const { return static_cast<int>(std::count(live_.begin(), live_.end(), true)); }

void GroupScheduler::ready(int rank, int64_t steps, int64_t rows) {
  PX_CHECK(live(rank));
  ready_[static_cast<size_t>(rank)] = true;
  version_[static_cast<size_t>(rank)] += steps - steps_[static_cast<size_t>(rank)];
  steps_[static_cast<size_t>(rank)] = steps;
  rows_ += rows;
  note_boundaries();
}

void GroupScheduler::leave(int rank) {
  live_[static_cast<size_t>(rank)] = false;
  ready_[static_cast<size_t>(rank)] = false;
}

// The global step crossed a boundary: the next round is every live replica's.
void GroupScheduler::note_boundaries() {
  const int64_t step = global_step();
  auto crossed = [&](int64_t& next, int64_t every) {
    if (next == 0 || step < next || step >= config_.end_step) return false;
    next = boundary_after(step, every);
    return true;
  };
  full_due_ = crossed(next_full_, config_.full_every) || full_due_;
  eval_due_ = crossed(next_eval_, config_.eval_every) || eval_due_;
  save_due_ = crossed(next_save_, config_.save_every) || save_due_;
  stop_due_ = stop_due_ || step >= config_.end_step;
}

Round GroupScheduler::form(uint64_t members) {
  Round round{.index = rounds_++, .members = members, .global_step = global_step(),
              .behind = std::vector<int64_t>(static_cast<size_t>(config_.ranks), 0)};
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int r = 0; r < config_.ranks; ++r)
    if (members >> r & 1) {
      ready_[static_cast<size_t>(r)] = false;
      lo = std::min(lo, version_[static_cast<size_t>(r)]);
      hi = std::max(hi, version_[static_cast<size_t>(r)]);
    }
  round.staleness = hi - lo;
  // The average holds the newest member's steps: every member is at its version now.
  for (int r = 0; r < config_.ranks; ++r)
    if (members >> r & 1) {
      round.behind[static_cast<size_t>(r)] = hi - version_[static_cast<size_t>(r)];
      version_[static_cast<size_t>(r)] = hi;
    }
  return round;
}

std::optional<Round> GroupScheduler::next() {
  if (stopped_ || live_count() == 0) return std::nullopt;
  uint64_t live = 0, ready = 0;
  int64_t oldest = INT64_MAX;
  for (int r = 0; r < config_.ranks; ++r) {
    if (!live_[static_cast<size_t>(r)]) continue;
    live |= uint64_t{1} << r;
    if (ready_[static_cast<size_t>(r)]) ready |= uint64_t{1} << r;
    oldest = std::min(oldest, version_[static_cast<size_t>(r)]);
  }
  if (stop_due_ || full_due_ || eval_due_ || save_due_) {
    if (ready != live) return std::nullopt;  // a round of everyone: wait for the rest
    Round round = form(live);
    round.stop = stop_due_;
    round.save = save_due_;
    round.evaluate = eval_due_ && !stop_due_;  // the end evaluates anyway
    round.full = stop_due_ || save_due_ || full_due_;
    full_due_ = eval_due_ = save_due_ = false;
    stopped_ = stop_due_;
    return round;
  }
  bool oldest_ready = false;
  uint64_t eligible = 0;
  for (int r = 0; r < config_.ranks; ++r) {
    if (!(ready >> r & 1)) continue;
    const int64_t ahead = version_[static_cast<size_t>(r)] - oldest;
    if (ahead == 0) oldest_ready = true;
    if (ahead <= config_.staleness) eligible |= uint64_t{1} << r;
  }
  const uint64_t group = oldest_ready ? ready : eligible;
  const int need = std::min(config_.min_group, live_count());
  if (std::popcount(group) < need || group == 0) return std::nullopt;
  return form(group);
}

}  // namespace px::sync
