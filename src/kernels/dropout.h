// Inverted dropout: y = x * mask / (1 - p), mask[i] = counter_uniform(seed, offset + i) >= p.
// The draw for element i depends only on (seed, offset + i), so results do not
// depend on thread count, and a batch-split shard passing its global offset
// reproduces the unsplit run's mask.
#pragma once

#include <cstdint>

namespace px::kernels {

void dropout(int64_t n, float p, uint64_t seed, uint64_t offset, const float* x, float* y,
             uint8_t* mask);
void dropout_backward(int64_t n, float p, const uint8_t* mask, const float* dy, float* dx);

}  // namespace px::kernels
