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

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "runtime/param_store.h"
#include "runtime/safetensors.h"
#include "runtime/sharded_tensors.h"

namespace px {

// What one rank contributes to a checkpoint.
struct CheckpointPart {
  std::vector<SavedRun> shards;  // this rank's runs (may be empty)
  std::map<std::string, std::string> who;  // "mesh", "coords": written with the shards
  // The lead rank's (rank 0 of the group) alone:
  const ParamStore* model = nullptr;  // gathered whole
  nlohmann::json state;
  NamedTensors compression;  // written when not empty
};

// Collective over `group` (nullptr: this process alone): every rank calls
// it with its part. The lead makes the staging directory, every rank writes
// its shard file, the lead writes the rest and swaps the directory in. A
// failure on any rank throws px::Error on every rank (the failing one with
// its own message, the others naming it) and leaves `dir` untouched.
void save_checkpoint(const std::string& dir, comm::Communicator* group, const CheckpointPart& mine);

struct Checkpoint {
  std::string dir;
  nlohmann::json state;
  ShardedTensors shards;  // parameters and optimizer state
  std::optional<SafetensorsFile> compression;  // when the run compressed gradients
};

// Reads state.json, checks every file it lists is there with its recorded
// size, and opens the shard files; px::Error names the directory, the file
// and what is wrong (missing, truncated, corrupt).
Checkpoint load_checkpoint(const std::string& dir);
// Only the model weights (for eval and sample); `path` is the directory or the .safetensors file.
SafetensorsFile load_model_weights(const std::string& path);

}  // namespace px
