// Which sequences run in the next iteration, and how many of their tokens
// (Orca's iteration-level scheduling, vLLM's scheduler): a finished
// sequence leaves at once and a waiting one joins at the next iteration.
// Each iteration takes at most `max_batch_tokens` rows: every running
// sequence's decode row first, then unfinished prefills, then waiting
// sequences in arrival order, a long prompt in chunks of what the budget
// leaves. A sequence joins only when the KV pool has blocks for the tokens
// it has; a decode that needs a new block and finds none preempts the
// latest-arrived running sequence by recomputation (its blocks freed, it
// waits first in line and computes its prompt and what it generated again).
// `request` batching (FasterTransformer's) is the baseline: a batch forms
// only when none runs, and runs until its last member ends.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "runtime/decode/block_pool.h"

namespace px::serve {

// One choice being generated: the engine's state of it.
struct SequenceState {
  uint64_t id = 0;              // arrival order
  std::vector<int32_t> tokens;  // the prompt, then what was generated
  int64_t prompt = 0;           // tokens of the prompt
  int64_t max_tokens = 1;       // to generate at most
  int64_t computed = 0;         // positions whose k and v the cache holds
  std::vector<int32_t> blocks;  // its block table
  int64_t preemptions = 0;
  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt; }
  // Rows to compute before its next token can be drawn (1: a decode).
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - computed; }
};

enum class Batching { iteration, request };
// "iteration" or "request" (--scheduler); px::Error naming the choices.
Batching batching_from_name(const std::string& name);
const char* batching_name(Batching batching);

struct SchedulerLimits {
  int64_t max_batch_tokens = 256;  // rows an iteration computes at most
  int64_t max_running = 32;        // sequences running at once
  Batching batching = Batching::iteration;
  // Admit only with blocks for the prompt and every token it may generate
  // (Orca's reservation; the baseline paging is measured against), instead
  // of for what it holds now.
  bool reserve_max_tokens = false;
  bool operator==(const SchedulerLimits&) const = default;
};

// A run of a sequence's positions computed this iteration; `samples`: its
// last row's logits give the sequence's next token.
struct ScheduledChunk {
  SequenceState* sequence = nullptr;
  int64_t start = 0;
  int64_t rows = 0;
  bool samples = false;
};

struct Schedule {
  std::vector<ScheduledChunk> chunks;
  std::vector<SequenceState*> preempted;  // this iteration, by recomputation
  int64_t rows() const;
};

class Scheduler {
 public:
  Scheduler(SchedulerLimits limits, decode::BlockPool& pool);

  // Queues a sequence (arrival order is the order of calls).
  void add(SequenceState* sequence);
  // Takes a sequence out wherever it is (finished, stopped, cancelled),
  // its blocks back to the pool.
  void remove(SequenceState* sequence);
  // The next iteration. Afterwards the caller runs it and, for each chunk,
  // advances `computed` by its rows (and appends the drawn token where it
  // samples).
  Schedule next();

  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  bool is_waiting(const SequenceState* s) const;
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  const std::deque<SequenceState*>& waiting_queue() const { return waiting_; }

 private:
  bool fits(const SequenceState& s) const;  // blocks for it to join now
  void preempt(SequenceState* s, Schedule& schedule);

  SchedulerLimits limits_;
  decode::BlockPool& pool_;
  std::deque<SequenceState*> waiting_;  // arrival order; the preempted first
  std::vector<SequenceState*> running_;  // arrival order
};

}  // namespace px::serve
