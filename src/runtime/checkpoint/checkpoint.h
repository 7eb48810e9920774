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
// Anything else in the directory (a run's metrics and trace, when --save
// names the run's own directory) is not the checkpoint's: every save
// carries it over to the new contents and never deletes it.
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
#include "runtime/state/param_store.h"
#include "runtime/checkpoint/checkpoint_state.h"
#include "runtime/checkpoint/commit.h"
#include "runtime/state/safetensors.h"
#include "runtime/state/sharded_tensors.h"

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

// Writes checkpoints in the background, assuming no filesystem the ranks
// share (commit.h). Construction is collective over `group` (nullptr: this
// process alone): it learns which ranks see the same `dir` (one
// filesystem: all; private disks: each host's ranks). save() is collective
// and cheap: each filesystem's lead rank stages `<dir>.tmp.<id>` there,
// then every rank writes its shard file into its filesystem's staging
// directory on its own thread and reports its bytes and checksum to rank 0
// over a communicator of the writer's own; rank 0 (which also writes the
// model) commits only if every rank wrote, and each filesystem's lead,
// told so, writes state.json (the commit record, listing that
// filesystem's files and checksums) and swaps its directory in. Until then
// `dir` holds the previous checkpoint, whatever dies. With keep_last > 1
// the previous checkpoints stay beside it as `<dir>.step-<S>` (the newest
// keep_last - 1 of them); on more than one filesystem at least one is
// kept, so a resume can fall back to the step every host committed
// (agreed_checkpoint).
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
  // Whether every rank sees the same `dir`. When not, each rank must write
  // every run it holds (ProgramExecutor::state_runs): a replica written
  // by a rank on another host would be out of this host's reach.
  bool shared() const { return filesystems_.shared(); }

 private:
  void write(CheckpointPart part, const std::string& staging);  // the background thread

  std::string dir_;
  comm::Communicator* group_;
  int keep_last_;
  Filesystems filesystems_;
  std::optional<comm::Communicator> commit_;  // the background thread's own, split from group_
  std::unique_ptr<StagedDirectory> staged_;  // a filesystem lead's, while a write is in flight
  std::thread thread_;
  std::string error_;  // the background write's, read after join
  std::atomic<bool> stop_{false};
};

// Where a run keeps its state and where it continues from: the checkpoint
// room's part of a job.
struct CheckpointOptions {
  std::string save;              // checkpoint directory
  int64_t save_every = 0;        // steps (checkpoint, and in-memory snapshot with restarts); 0 = only at the end
  int keep_last = 1;             // checkpoints kept: the latest in `save`, older ones beside it as <save>.step-<S>
  std::string resume;            // checkpoint directory to continue from
  bool resume_if_saved = false;  // `resume` may hold no checkpoint yet (a restart): start afresh then
  bool operator==(const CheckpointOptions&) const = default;
};

// px::Error naming the bad option: a negative interval, no checkpoint kept.
void validate(const CheckpointOptions& options);

// The same, waited for: save() then finish().
void save_checkpoint(const std::string& dir, comm::Communicator* group, CheckpointPart mine);

// `<dir>.step-<S>`: where checkpoint step S is kept once a newer one
// replaces it (CheckpointWriter's keep_last).
std::string kept_checkpoint_path(const std::string& dir, int64_t step);

// Whether a save to `dir` writes or deletes `name`, a top-level entry of
// `dir`: the checkpoint's own files above.
bool written_by_checkpoints(const std::string& name);

// px::Error when `path`, another output of the run (named by `what`, e.g.
// "--metrics"), is one a save to `dir` would replace or delete: one of the
// checkpoint's own files in `dir`, a checkpoint kept beside it
// (`<dir>.step-<S>`), a staging directory (`<dir>.tmp.<id>`), or `dir`
// itself for a file (a directory of outputs, such as --run-dir, may be
// `dir`: its files are carried over). A run checks its outputs before its
// first step.
enum class OutputKind { file, directory };
void check_not_replaced_by_saves(const std::string& dir, const std::string& path, std::string_view what,
                                 OutputKind kind = OutputKind::file);

// A checkpoint as read back: from a directory, or from memory
// (runtime/checkpoint/snapshots.h) after a rank's loss.
struct Checkpoint {
  std::string dir;  // where it came from, for the log
  CheckpointState state;
  ShardedTensors shards;  // parameters and optimizer state
  std::optional<SafetensorsFile> compression;  // when the run compressed gradients
};

// A checkpoint directory's state.json, checked (CheckpointState::from_json);
// px::Error names the directory when it has none or it is not valid.
CheckpointState read_checkpoint_state(const std::string& dir);
// Reads state.json (read_checkpoint_state), checks every file it
// lists is there with its recorded size (and each shard file its
// checksum), and opens the shard files; px::Error names the directory, the file
// and what is wrong (missing, truncated, corrupt).
Checkpoint load_checkpoint(const std::string& dir);

// The checkpoint directory to resume from, agreed by every rank of `group`
// (collective; nullptr: this process alone) when each may see its own
// `dir` (hosts with private disks): the lowest step any rank has in `dir`
// (its last commit), read from `dir` where it is that step and else from
// `<dir>.step-<S>` kept beside it; "" when some rank has none and `if_any`
// (a restart before the first checkpoint), else px::Error naming the rank.
std::string agreed_checkpoint(const std::string& dir, comm::Communicator* group, bool if_any);
// Only the model weights (for eval and sample); `path` is the directory or the .safetensors file.
SafetensorsFile load_model_weights(const std::string& path);

}  // namespace px
