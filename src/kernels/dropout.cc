// Inverted dropout. Each element's keep/drop draw is counter_uniform(seed,
// offset + i), so chunks can be processed on any thread in any order.
#include "kernels/dropout.h"

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/grain.h"

namespace px::kernels {
void dropout(int64_t n, float p, uint64_t seed, uint64_t offset, const float* x, float* y,
             uint8_t* mask) {
  PX_CHECK(p >= 0.0f && p <= 1.0f, "dropout p={}", p);
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  px::parallel_for(0, n, detail::kGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const bool keep = px::counter_uniform(seed, offset + static_cast<uint64_t>(i)) >= p;
      mask[i] = keep ? 1 : 0;
      y[i] = keep ? x[i] * keep_scale : 0.0f;
    }
  });
}

void dropout_backward(int64_t n, float p, const uint8_t* mask, const float* dy, float* dx) {
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  px::parallel_for(0, n, detail::kCheapGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dx[i] = mask[i] != 0 ? dy[i] * keep_scale : 0.0f;
  });
}

}  // namespace px::kernels
