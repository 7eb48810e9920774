// The model and data a checkpoint was saved from, as its state.json's
// "config" (CheckpointState::config): a resume trains the same model on
// the same data.
#pragma once

#include <nlohmann/json.hpp>

#include "nn/build_model.h"
#include "runtime/tasks/task.h"

namespace px {

// {"model": kind, "data": path, "<kind>": {its sizes}} (an ONNX model: its loss and input roles).
nlohmann::json model_json(const nn::ModelConfig& model, const DataOptions& data);
// Sets `model` (its kind and sizes) and `data`'s path from a saved config;
// px::Error naming the field for a damaged or hand-edited one.
void apply_model_json(const nlohmann::json& json, nn::ModelConfig& model, DataOptions& data);

}  // namespace px
