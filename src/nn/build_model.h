// The model families by name: which one a run trains and its sizes (what a
// checkpoint's config records), built for a batch size. Needs no data.
#pragma once

#include <cstdint>
#include <string>

#include "nn/cnn.h"
#include "nn/gpt.h"
#include "nn/mlp.h"
#include "nn/model.h"

namespace px::nn {

struct ModelConfig {
  std::string kind = "gpt";  // mlp | cnn | gpt
  GptConfig gpt;
  MlpConfig mlp;
  CnnConfig cnn;
};

// The model `config` names, for a batch of `batch` rows (gpt: `training`
// adds dropout). px::Error for an unknown kind.
Model build_model(const ModelConfig& config, int64_t batch, bool training);

}  // namespace px::nn
