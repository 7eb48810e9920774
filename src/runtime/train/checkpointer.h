// Keeps a rank's training state at step boundaries: checkpoints written in
// the background to --save (checkpoint.h) and, with restarts in process,
// every rank's state in memory with a copy at its buddy rank
// (snapshots.h). Its copies are charged to their own memory account: they
// are not the step's memory (what the prediction and the memory report
// describe).
#pragma once

#include <optional>
#include <string>

#include "comm/communicator.h"
#include "core/memory.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/snapshots.h"
#include "runtime/executor/program_executor.h"

namespace px {

class Checkpointer {
 public:
  // `dir` empty: no checkpoints on disk; `snapshots` nullptr: none in
  // memory. `strategy` is the one the executor runs.
  Checkpointer(const std::string& dir, int keep_last, comm::Communicator* group, SnapshotStore* snapshots,
               const parallel::Strategy& strategy);

  // Collective over the group, at a step boundary: `state` (the run's; the
  // compression spec is added here) with the executor's runs of parameters
  // and optimizer state, and under compression every rank's error-feedback
  // state. `last` waits until the checkpoint is in place.
  void save(ProgramExecutor& executor, CheckpointState state, bool last);
  // The most bytes of copies held beside training at once.
  int64_t peak_bytes() const { return memory_->stats().peak_bytes; }

 private:
  comm::Communicator* group_;
  SnapshotStore* snapshots_;
  std::string mesh_;         // the strategy's, "{dp:2, tp:2}"
  std::string compression_;  // its --compress spec
  std::optional<CheckpointWriter> writer_;
  MemoryAccount* memory_;
};

}  // namespace px
