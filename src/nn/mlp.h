// Multi-layer perceptron classifier for 28x28 images:
// flatten -> (linear -> relu) per hidden layer -> linear to classes.
// Parameters: fc{i}.weight (in, out) and fc{i}.bias (out), i from 1;
// initialized like torch.nn.Linear (uniform within 1/sqrt(in)).
#pragma once

#include <cstdint>
#include <vector>

#include "nn/model.h"

namespace px::nn {

struct MlpConfig {
  int64_t inputs = 784;
  std::vector<int64_t> hidden = {256, 256};
  int64_t classes = 10;
  bool operator==(const MlpConfig&) const = default;
};

void validate(const MlpConfig& config);
Model build_mlp(const MlpConfig& config, int64_t batch);

}  // namespace px::nn
