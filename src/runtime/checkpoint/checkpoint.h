// A checkpoint is a directory, replaced atomically as a whole
// (atomic_file.h), holding:
//   model.safetensors        the parameters gathered whole, GPT-2 names: any
//                            safetensors reader loads it (eval, sample, PyTorch)
//   shards/rank<R>.safetensors  the training state rank R held: its runs of
//                            every parameter ("<param>") and optimizer slot
//                            ("<param>.exp_avg", ...), each with its global
//                            box (sharded_tensors.h). A copy held by several
//                            ranks is written once, by the one at coordinate
//                            0 of the axes that replicate it.
//   state.json               step, model config, data-order state, optimizer
//                            steps, rank count and mesh, and the size of
//                            every file above
//   compression.safetensors  (compressed data parallelism only) every rank's
//                            error-feedback residuals, PowerSGD Q, DGC velocities
// A resume reads the parameters and optimizer state from the shards, each
// rank only the runs it needs, so a checkpoint saved under any strategy
// and world size loads into any other. A crash or an error on any rank
// while saving leaves the previous checkpoint intact.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/atomic_file.h"
#include "runtime/executor/param_store.h"
#include "runtime/checkpoint/checkpoint_state.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/sharded_tensors.h"

namespace px {

// What one rank contributes to a checkpoint: copies, taken at a step
// boundary, so training may go on while they are written.
struct CheckpointPart {
  std::vector<SavedRun> shards;  // this rank's runs (may be empty)
  std::map<std::string, std::string> who;  // "mesh", "coords": written with the shards
  // The lead rank's (rank 0 of the group) alone:
  NamedTensors model;  // the parameters gathered whole (copies, not views of live storage)
  CheckpointState state;  // its file list is the writer's
  NamedTensors compression;  // written when not empty
};

// Writes checkpoints in the background. save() is collective over `group`
// (nullptr: this process alone) and cheap: the lead stages
// `<dir>.tmp.<id>`, then every rank writes its shard file on its own
// thread and marks it written (`written/rank<R>`, with its error if it
// failed); the lead's thread writes the model and the state once every
// rank's mark is there and swaps the directory in. Until then `dir` holds
// the previous checkpoint, whatever dies. With keep_last > 1 the previous
// checkpoints stay beside it as `<dir>.step-<S>` (the newest keep_last - 1
// of them).
class CheckpointWriter {
 public:
  CheckpointWriter(std::string dir, comm::Communicator* group, int keep_last = 1);
  // Abandons a write in flight (its staging directory is removed).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Collective, at a step boundary: ends the previous write (px::Error on
  // every rank if it failed on any), then starts writing `part`.
  void save(CheckpointPart part);
  // Collective: waits until the write in flight is in place; px::Error on
  // every rank (the failing one with its own message, the others naming
  // it) if any rank failed, and `dir` keeps the previous checkpoint.
  void finish();
  const std::string& dir() const { return dir_; }

 private:
  void write(CheckpointPart part, const std::string& staging);  // the background thread

  std::string dir_;
  comm::Communicator* group_;
  int keep_last_;
  std::unique_ptr<StagedDirectory> staged_;  // the lead's, while a write is in flight
  std::thread thread_;
  std::string error_;  // the background write's, read after join
  std::atomic<bool> stop_{false};
};

// The same, waited for: save() then finish().
void save_checkpoint(const std::string& dir, comm::Communicator* group, CheckpointPart mine);

// `<dir>.step-<S>`: where checkpoint step S is kept once a newer one
// replaces it (CheckpointWriter's keep_last).
std::string kept_checkpoint_path(const std::string& dir, int64_t step);

// A checkpoint as read back: from a directory, or from memory
// (runtime/checkpoint/snapshots.h) after a rank's loss.
struct Checkpoint {
  std::string dir;  // where it came from, for the log
  CheckpointState state;
  ShardedTensors shards;  // parameters and optimizer state
  std::optional<SafetensorsFile> compression;  // when the run compressed gradients
};

// Reads state.json (CheckpointState::from_json), checks every file it
// lists is there with its recorded size, and opens the shard files; px::Error names the directory, the file
// and what is wrong (missing, truncated, corrupt).
Checkpoint load_checkpoint(const std::string& dir);
// Only the model weights (for eval and sample); `path` is the directory or the .safetensors file.
SafetensorsFile load_model_weights(const std::string& path);

}  // namespace px
