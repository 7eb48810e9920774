// The model families by name: which one a run trains and its sizes (what a
// checkpoint's config records), built for a batch size. Needs no data.
#pragma once

#include <cstdint>
#include <string>

#include "graph/precision.h"
#include "nn/cnn.h"
#include "nn/gpt.h"
#include "nn/mlp.h"
#include "nn/model.h"
#include "nn/onnx/onnx_import.h"

namespace px::nn {

struct ModelConfig {
  std::string kind = "gpt";  // mlp | cnn | gpt | a path ending in .onnx (nn/onnx/onnx_import.h)
  GptConfig gpt;
  MlpConfig mlp;
  CnnConfig cnn;
  OnnxConfig onnx;  // an .onnx kind: its path (= kind), loss and input bindings
  bool operator==(const ModelConfig&) const = default;
};

// The kind is one parallax knows (an .onnx one only when built with ONNX),
// --loss and --input only for an imported model, and the family's sizes
// (px::Error naming the bad option).
void validate(const ModelConfig& config);

// The model `config` names, for a batch of `batch` rows (gpt: `training`
// and imported ONNX models add dropout), in fp32: a run's precision is its
// strategy's, stamped by the lowering. px::Error for an unknown kind.
Model build_model(const ModelConfig& config, int64_t batch, bool training);

}  // namespace px::nn
