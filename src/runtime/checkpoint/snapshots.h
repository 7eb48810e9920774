// In-memory copies of the training state, so that a restart after a rank's
// loss restores without reading disk (in-process ranks: `parallax train
// --max-restarts`). At every --save-every step each rank keeps its own
// state and sends a copy to its buddy, rank (r + 1) mod N, over the
// transport, as Gemini and CheckFreq keep checkpoints in peers' memory: the
// loss of any one rank (its memory gone with it) leaves every rank's state
// somewhere. The store lives outside the rank threads, in the process that
// restarts them; it keeps the two latest generations, so a failure in the
// middle of an exchange still finds a step every rank's state holds.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/state/sharded_tensors.h"

namespace px {

// One rank's state at a step boundary: what its checkpoint part holds.
struct RankSnapshot {
  int64_t step = -1;
  CheckpointState state;       // state.json's fields (every rank has them)
  std::vector<SavedRun> runs;  // this rank's runs of parameters and optimizer state
  NamedTensors compression;    // rank 0: every rank's error-feedback state
};

// Collective over `world`: sends `own` to rank (r + 1) mod N and returns
// the copy rank (r - 1) mod N sent (nothing at one rank).
std::optional<RankSnapshot> exchange_with_buddy(comm::Communicator& world, const RankSnapshot& own);

class SnapshotStore {
 public:
  explicit SnapshotStore(int ranks) : ranks_(ranks) {}
  int ranks() const { return ranks_; }

  // Rank `rank` keeps `own`, and the copy it holds of rank (rank - 1) mod N.
  void keep(int rank, RankSnapshot own, std::optional<RankSnapshot> buddy_copy);
  // Rank `rank`'s memory is gone (its process died): its own state and the
  // copy it held.
  void lose(int rank);
  // Every rank's state at the latest step all of them are held at (each
  // from its own memory or its buddy's), as a checkpoint; std::nullopt when
  // some rank's state is lost both ways.
  std::optional<Checkpoint> restore() const;

 private:
  struct Held {
    int rank;  // whose state
    int holder;
    RankSnapshot snapshot;
  };
  int ranks_;
  mutable std::mutex mutex_;
  std::vector<Held> held_;  // at most two generations per (rank, holder)
};

}  // namespace px
