#include "serve/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace px::serve {

Batching batching_from_name(const std::string& name) {
  if (name == "iteration") return Batching::iteration;
  if (name == "request") return Batching::request;
  fail("--scheduler '{}' is not one of iteration, request", name);
}

const char* batching_name(Batching batching) { return batching == Batching::iteration ? "iteration" : "request"; }

bool Scheduler::is_waiting(const SequenceState* s) const {
  return std::find(waiting_.begin(), waiting_.end(), s) != waiting_.end();
}

int64_t Schedule::rows() const {
  int64_t n = 0;
  for (const ScheduledChunk& c : chunks) n += c.rows;
  return n;
}

Scheduler::Scheduler(SchedulerLimits limits, decode::BlockPool& pool) : limits_(limits), pool_(pool) {
  if (limits_.max_batch_tokens < 1) fail("--max-batch-tokens is {}, expected >= 1", limits_.max_batch_tokens);
  if (limits_.max_running < 1) fail("--max-running is {}, expected >= 1", limits_.max_running);
}

void Scheduler::add(SequenceState* s) {
  PX_CHECK(s->pending() >= 1, "sequence {} has nothing to compute", s->id);
  waiting_.push_back(s);
}

void Scheduler::remove(SequenceState* s) {
  std::erase(waiting_, s);
  std::erase(running_, s);
  pool_.release(s->blocks);
}

bool Scheduler::fits(const SequenceState& s) const {
  const int64_t tokens = limits_.reserve_max_tokens ? s.prompt + s.max_tokens : static_cast<int64_t>(s.tokens.size());
  return pool_.blocks_for(tokens) - static_cast<int64_t>(s.blocks.size()) <= pool_.free_blocks();
}

void Scheduler::preempt(SequenceState* s, Schedule& schedule) {
  std::erase(running_, s);
  pool_.release(s->blocks);
  s->computed = 0;
  ++s->preemptions;
  waiting_.push_front(s);
  schedule.preempted.push_back(s);
}

Schedule Scheduler::next() {
  Schedule schedule;
  int64_t budget = limits_.max_batch_tokens;
  // Decodes first, in arrival order: a sequence whose next row needs a
  // block the pool lacks takes it from the latest arrival, itself last.
  std::vector<SequenceState*> scheduled;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    SequenceState* s = running_[i];
    if (s->pending() != 1) continue;
    const auto tokens = static_cast<int64_t>(s->tokens.size());
    bool preempted_itself = false;
    while (!pool_.grow(s->blocks, tokens)) {
      SequenceState* victim = running_.back();
      preempt(victim, schedule);
      if (victim == s) {
        preempted_itself = true;
        break;
      }
    }
    if (preempted_itself) break;  // it was the latest: nothing after it runs
    schedule.chunks.push_back({.sequence = s, .start = s->computed, .rows = 1, .samples = true});
    scheduled.push_back(s);
    --budget;
  }
  // Prefills under way (their blocks were taken when they joined).
  for (SequenceState* s : running_) {
    if (budget == 0) break;
    if (s->pending() == 1 || std::find(scheduled.begin(), scheduled.end(), s) != scheduled.end()) continue;
    const int64_t rows = std::min(s->pending(), budget);
    schedule.chunks.push_back({.sequence = s, .start = s->computed, .rows = rows, .samples = rows == s->pending()});
    budget -= rows;
  }
  // Waiting sequences join in arrival order while blocks, rows and places
  // last; the first that does not fit stops the queue (no overtaking).
  const bool may_join = limits_.batching == Batching::iteration || running_.empty();
  while (may_join && budget > 0 && !waiting_.empty() && static_cast<int64_t>(running_.size()) < limits_.max_running) {
    SequenceState* s = waiting_.front();
    if (!fits(*s)) break;
    const int64_t reserve = limits_.reserve_max_tokens ? s->prompt + s->max_tokens : static_cast<int64_t>(s->tokens.size());
    PX_CHECK(pool_.grow(s->blocks, reserve), "blocks counted free were not");
    waiting_.pop_front();
    running_.push_back(s);
    const int64_t rows = std::min(s->pending(), budget);
    schedule.chunks.push_back({.sequence = s, .start = s->computed, .rows = rows, .samples = rows == s->pending()});
    budget -= rows;
  }
  return schedule;
}

}  // namespace px::serve
