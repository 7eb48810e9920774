// state.json: what a checkpoint says about the run that wrote it, typed.
// Written by the data-parallel trainer and the parameter server alike, read
// by a resume, a restart (from disk or from in-memory snapshots), eval and
// sample. Optional fields are absent from the JSON when unset.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace px {

struct CheckpointState {
  int64_t step = 0;                 // steps trained
  nlohmann::json config;            // the model config (model_json, apply_model_json)
  nlohmann::json data;              // the data order's state (the task's sampler restores it)
  std::string optimizer;            // its kind: "adamw", "sgd", ...
  int64_t optimizer_steps = 0;      // updates the optimizer applied (bias correction)
  int ranks = 1;                    // the ranks that saved it
  std::string mesh;                 // their mesh, "{dp:4}" ("": not written, parameter server)
  std::optional<int64_t> batches;   // batches drawn (bad ones included); absent: one per step
  std::vector<int64_t> bad_batches;  // batches skipped for good (numbered from 1 as drawn)
  std::optional<double> saved_at;   // unix seconds
  std::string compression;          // the --compress spec its residuals were saved with ("": none)
  std::string parameter_server;     // the parameter-server mode that saved it ("": none)
  std::map<std::string, uint64_t> files;  // every file of the checkpoint, relative path -> bytes
  // The shard files' FNV-1a checksums (commit.h), relative path -> checksum,
  // as their ranks reported them before the commit; a load verifies them.
  std::map<std::string, uint64_t> checksums;

  bool operator==(const CheckpointState&) const = default;
  nlohmann::json to_json() const;
  // Every field of the type a resume reads it as, so a damaged or
  // hand-edited file is refused here, by name, and not deep inside a
  // resume; px::Error names `document` ("checkpoint 'dir'"), the field,
  // its value and what was expected. With `on_disk` the file list is
  // required and its paths must lie inside the checkpoint. The model
  // config and the data order's state are checked by their readers.
  static CheckpointState from_json(const nlohmann::json& json, const std::string& document, bool on_disk);
};

}  // namespace px
