// Partial reduce's group scheduling (SDPipe's centralized half), as plain
// logic the coordinator thread (coordinator.h) drives and tests call
// directly: replicas report each finished step, the scheduler answers with
// rounds, each a set of replicas that average their parameters together.
//
// A replica's model version counts the steps in its model: one for each
// of its own, and after a round the newest member's (averaging brings
// every member up to the newest model of the group: P-Reduce's versions).
// A slow replica thus falls behind only while it steps alone, and a round
// it joins brings it back to the front.
//
// Rules, in order, each time a report arrives:
//   - the global step is the rows every replica computed, in global batches
//     (fast replicas count for more: they computed more);
//   - crossing an evaluation, checkpoint or full-synchronization boundary,
//     or the end, makes the next round one of every live replica (it waits
//     for all of them to be ready); at the end it is the last;
//   - otherwise the ready replicas form a round once at least min_group of
//     them can (fewer only when fewer are alive): a replica whose version
//     is more than `staleness` ahead of the oldest live one is held back
//     until the oldest is ready too, so none runs away from the others.
// A round says how far each member's version is behind its newest
// member's; the members weigh their models by their rows over one plus
// that (a staleness-aware average: a stale model counts for less), which
// with equal versions is the rows-weighted average.
// A replica that left (died) is in no later round.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace px::sync {

struct Round {
  int64_t index = 0;
  uint64_t members = 0;     // bit r: rank r
  int64_t global_step = 0;  // global steps complete when it formed
  int64_t staleness = 0;    // the most versions apart two members are
  std::vector<int64_t> behind;  // by rank: a member's versions behind the newest member's (0 for non-members)
  bool full = false;        // every live replica, state averaged and kept (a save or the end needs one model)
  bool evaluate = false;    // rank 0 evaluates the members' average (every live replica's)
  bool save = false;        // rank 0 saves a checkpoint of it
  bool stop = false;        // the last round
};

// The ranks of a round's member mask, ascending.
std::vector<int> members_of(uint64_t members);

struct SchedulerConfig {
  int ranks = 2;
  int min_group = 2;
  int staleness = 8;
  int64_t batch_rows = 1;  // rows of a global batch
  int64_t start_step = 0;  // global steps complete at the start (a resumed run's)
  int64_t end_step = 1;
  int64_t full_every = 0;  // 0: none but save's and the end's
  int64_t eval_every = 0;
  int64_t save_every = 0;
};

class GroupScheduler {
 public:
  explicit GroupScheduler(const SchedulerConfig& config);
  // Rank `rank` finished its `steps`-th step on `rows` rows and waits.
  void ready(int rank, int64_t steps, int64_t rows);
  // Rank `rank` left (it died): in no later round.
  void leave(int rank);
  // The round to start now, if one can; its members are no longer ready.
  std::optional<Round> next();
  bool stopped() const { return stopped_; }
  int64_t global_step() const { return rows_ / config_.batch_rows; }
  int64_t rows() const { return rows_; }  // every replica's, the start's included
  int live_count() const;
  bool live(int rank) const { return live_[static_cast<size_t>(rank)]; }
  int64_t steps(int rank) const { return steps_[static_cast<size_t>(rank)]; }
  int64_t version(int rank) const { return version_[static_cast<size_t>(rank)]; }

 private:
  void note_boundaries();
  Round form(uint64_t members);

  SchedulerConfig config_;
  std::vector<bool> live_, ready_;
  std::vector<int64_t> steps_;    // each replica's own steps
  std::vector<int64_t> version_;  // each replica's model version
  int64_t rows_ = 0;
  int64_t rounds_ = 0;
  int64_t next_full_ = 0, next_eval_ = 0, next_save_ = 0;  // boundaries in global steps (0: none)
  bool full_due_ = false, eval_due_ = false, save_due_ = false, stop_due_ = false, stopped_ = false;
};

}  // namespace px::sync
