// Convolutional classifier for 28x28 grey images, as the PyTorch reference:
//   conv1 3x3 (1->c1) relu pool2   28 -> 26 -> 13
//   conv2 3x3 (c1->c2) relu pool2  13 -> 11 -> 5
//   fc1 (c2*5*5 -> hidden) relu, fc2 (hidden -> classes)
// Parameters conv{1,2}.weight (out, in, 3, 3), .bias; fc{1,2}.weight (in, out), .bias;
// initialized like torch (uniform within 1/sqrt(fan_in)).
#pragma once

#include <cstdint>

#include "nn/model.h"

namespace px::nn {

struct CnnConfig {
  int64_t channels1 = 32;
  int64_t channels2 = 64;
  int64_t hidden = 128;
  int64_t classes = 10;
  bool operator==(const CnnConfig&) const = default;
};

void validate(const CnnConfig& config);
Model build_cnn(const CnnConfig& config, int64_t batch);

}  // namespace px::nn
