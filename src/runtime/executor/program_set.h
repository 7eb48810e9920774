// The Programs a run switches between: lowerings of one strategy on one
// rank for global batches of different sizes (an epoch's partial last
// batch: Program::global_rows), each with the per-instruction facts the
// step loop reads of it. They share every layout (parameters, buckets,
// buffers, optimizer shards, gradient collectives; a named error
// otherwise), so one set of parameters, optimizer and error-feedback state
// serves them all; their local graphs, micro-batches and instructions are
// their own. One is active.
#pragma once

#include <vector>

#include "parallel/lower/liveness.h"
#include "parallel/program.h"
#include "runtime/optimizer/optimizer.h"

namespace px {

// A program and what the step loop reads of it per instruction.
struct IndexedProgram {
  parallel::Program program;
  parallel::Liveness liveness;
  std::vector<int> member_of;        // Accumulate: its buffer member's index (-1)
  std::vector<int> shard_of_update;  // Update: its optimizer shard (-1)
  // A deferred instruction waits for it, so the step returns with it still
  // running (P3's gradient reductions).
  std::vector<bool> carried;
  int last_compute = -1;  // the last Compute instruction (where a pipeline's span ends)
  std::vector<ParamShard> shards;  // the optimizer shards its updates name, in order

  explicit IndexedProgram(parallel::Program program);
};

class ProgramSet {
 public:
  explicit ProgramSet(parallel::Program first) { programs_.emplace_back(std::move(first)); }

  const IndexedProgram& active() const { return programs_[active_]; }
  // `other` indexed, after checking it shares every layout with the first
  // (px::Error naming what differs); nothing when one for its rows is here.
  void add(parallel::Program other);
  bool has_for(int64_t global_rows) const { return index_for(global_rows) >= 0; }
  // Whether a step of `global_rows` rows (0: the active program's) runs
  // another program than the active one; px::Error when none is lowered for it.
  bool switches_for(int64_t global_rows) const;
  void activate(int64_t global_rows) { active_ = static_cast<size_t>(index_for(global_rows)); }

 private:
  int index_for(int64_t global_rows) const;
  std::vector<IndexedProgram> programs_;
  size_t active_ = 0;
};

}  // namespace px
