// Tensors saved in pieces by many ranks and read back under any other
// split: the shard files of a checkpoint (checkpoint.h).
//
// A shard file is a safetensors file of one rank's runs (parallel/shard.h):
// each tensor holds run.count() elements, 1-D, and the file's metadata
// places it in the global tensor under the same name, as JSON:
//   "h.0.attn.c_attn.weight.exp_avg": {"global": [64, 192], "local": [64, 96],
//       "pieces": [{"global_offset": [0, 0], "local_offset": [0, 0], "extent": [64, 32]}, ...],
//       "begin": 0, "end": 3072}
// plus "rank", "mesh" and "coords" entries that say who wrote it.
// A reader assembles the run it wants from every saved run whose box meets
// it and names what is missing when the saved runs do not cover it.
#pragma once

#include <map>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "parallel/shard.h"
#include "runtime/state/safetensors.h"

namespace px {

struct SavedRun {
  std::string name;  // "<param>" or "<param>.<slot>"
  parallel::ShardRun run;
  Tensor values;  // run.count() float32 elements
};

// A run's box as JSON ({"global", "local", "pieces", "begin", "end"}), and
// back: px::Error names the tensor and `where` (a file) when it is bad.
nlohmann::json shard_run_json(const parallel::ShardRun& run);
parallel::ShardRun shard_run_from_json(const std::string& text, const std::string& name, const std::string& where);

// Writes `runs` to `path` (atomically, atomic_file.h) with their boxes;
// `who` adds the writer's "rank", "mesh" and "coords" to the metadata.
void save_shard_file(const std::string& path, const std::vector<SavedRun>& runs,
                     const std::map<std::string, std::string>& who);

// The runs of a set of shard files, opened lazily: headers are read and
// checked on construction (px::Error names the file and the bad entry),
// tensor bytes when a read needs them.
class ShardedTensors {
 public:
  ShardedTensors() = default;
  // `what` names the set in errors (the checkpoint directory).
  ShardedTensors(const std::vector<std::string>& files, std::string what);
  // Runs held in memory (a snapshot: runtime/checkpoint/snapshots.h).
  ShardedTensors(const std::vector<SavedRun>& runs, std::string what);

  const std::string& where() const { return what_; }
  bool contains(const std::string& name) const { return runs_.count(name) > 0; }
  // The global shape saved for `name`; px::Error when absent.
  const Shape& global_shape(const std::string& name) const;
  // `want.count()` float32 elements of tensor `name` over the run `want`,
  // read from every saved run that meets it. px::Error when `name` is
  // absent, when its saved global shape differs from want.global, or when
  // the saved runs leave an element of `want` uncovered (named by its
  // global index).
  Tensor read(const std::string& name, const parallel::ShardRun& want) const;
  // The whole tensor `name` of shape `shape`.
  Tensor read_whole(const std::string& name, const Shape& shape) const {
    return read(name, parallel::ShardRun::whole(shape)).reshape(shape);
  }

 private:
  struct Located {
    size_t file;  // index into readers_, or (in_memory) into held_
    parallel::ShardRun run;
    bool in_memory = false;
  };
  void add(const std::string& name, parallel::ShardRun run, size_t index, bool in_memory, const std::string& where);
  std::vector<Tensor> held_;
  std::string what_;
  std::vector<SafetensorsReader> readers_;
  std::map<std::string, std::vector<Located>> runs_;
};

}  // namespace px
