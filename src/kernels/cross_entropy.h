// Softmax cross-entropy over rows of logits (N, V) with integer targets (N).
//   loss = scale * sum_n (logsumexp(logits[n]) - logits[n, target[n]])
// `scale` is 1/global_batch for a mean; keeping it explicit makes the loss a
// plain sum over rows, so a batch-split run's partial losses add up exactly.
// Saves lse[N] for backward. Targets outside [0, V) are a caller bug.
#pragma once

#include <cstdint>

namespace px::kernels {

float cross_entropy(int64_t N, int64_t V, const float* logits, const int32_t* targets,
                    float scale, float* lse);
// dlogits = dloss * scale * (softmax(logits) - onehot(target)); overwritten.
void cross_entropy_backward(int64_t N, int64_t V, const float* logits, const int32_t* targets,
                            const float* lse, float scale, float dloss, float* dlogits);

namespace ref {
float cross_entropy(int64_t N, int64_t V, const float* logits, const int32_t* targets,
                    float scale, float* lse);
void cross_entropy_backward(int64_t N, int64_t V, const float* logits, const int32_t* targets,
                            const float* lse, float scale, float dloss, float* dlogits);
}  // namespace ref

}  // namespace px::kernels
