// A checkpoint is a directory, replaced atomically as a whole
// (atomic_file.h), holding:
//   model.safetensors      the parameters, GPT-2 names; any safetensors reader loads it
//   optimizer.safetensors  optimizer state ("<param>.exp_avg", ...)
//   state.json             step, model config, data-order state, optimizer steps
//   compression.safetensors (compressed data parallelism only) every rank's
//                          error-feedback residuals, PowerSGD Q, DGC velocities
// A crash while saving leaves the previous checkpoint intact.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/optimizer.h"
#include "runtime/param_store.h"
#include "runtime/safetensors.h"

namespace px {

struct Checkpoint {
  SafetensorsFile model;
  SafetensorsFile optimizer;
  std::optional<SafetensorsFile> compression;  // when the run compressed gradients
  nlohmann::json state;
};

// `optimizer_state`: whole tensors "<param>.<slot>" (sharded state gathered
// first); `compression_state`: every rank's, written when not empty.
void save_checkpoint(const std::string& dir, const ParamStore& params, const NamedTensors& optimizer_state,
                     const nlohmann::json& state, const NamedTensors& compression_state = {});
// Reads all three files; px::Error names the directory and what is wrong
// (missing, truncated, corrupt).
Checkpoint load_checkpoint(const std::string& dir);
// Only the model weights (for eval and sample); `path` is the directory or the .safetensors file.
SafetensorsFile load_model_weights(const std::string& path);

}  // namespace px
