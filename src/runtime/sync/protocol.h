// Partial reduce's wire protocol between the replicas and the coordinator
// (a thread of rank 0), on the control communicator train_sync splits off
// for it (fixed tags; the averaging runs on a second one, in views of the
// round's members, comm::Communicator::view).
//
// After each step, every replica r:
//   r -> 0  kReadyTag  ReadyMessage{ready, steps, rows, compute_s, wait_s, loss}
//   0 -> r  kRoundTag  RoundMessage{round, r's weight, the members' total}
//                                               once the scheduler puts r in a round
// then averages with the round's members, scaling its model by its weight
// over the total (rows over one plus its versions behind: group_scheduler.h). A replica that dies in process
// sends ReadyMessage{leave, reason} instead and nothing more; the
// coordinator keeps one receive posted per live replica.
#pragma once

#include <cstdint>

namespace px::sync {

constexpr uint32_t kReadyTag = 1;
constexpr uint32_t kRoundTag = 2;

struct ReadyMessage {
  enum Kind : int32_t { kReady = 1, kLeave = 2 };
  int32_t kind = kReady;
  int32_t unused = 0;
  int64_t steps = 0;       // the replica's own steps done (its resumed start included)
  int64_t rows = 0;        // rows its last step computed
  double compute_s = 0;    // its last step's forward, backward and update
  double wait_s = 0;       // since the step before: waiting for a round and averaging
  double loss = 0;         // its last step's loss (mean over its rows)
  char reason[232] = {};   // kLeave: why (NUL-terminated)
};

struct RoundMessage {
  int64_t index = 0;
  uint64_t members = 0;
  int64_t global_step = 0;
  int32_t flags = 0;  // kFull | kEvaluate | kSave | kStop
  int32_t unused = 0;
  double weight = 0;  // the receiver's in the average
  double total = 0;   // the members' weights summed
  static constexpr int32_t kFull = 1, kEvaluate = 2, kSave = 4, kStop = 8;
};

}  // namespace px::sync
