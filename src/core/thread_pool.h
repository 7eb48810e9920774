// A small fork-join pool for kernels: parallel_for splits [begin, end) into
// contiguous chunks, one per thread, and the caller works on the first. The
// thread count is set once per process (kernels/threads.h sets BLAS's too).
#pragma once

#include <cstdint>
#include <functional>

namespace px {

// Number of threads parallel_for uses (>= 1). Default 1.
int num_threads();
void set_num_threads(int threads);

// Calls body(lo, hi) over disjoint chunks covering [begin, end). Chunks hold
// at least `grain` items, so small loops run inline on the caller. Nested
// calls from inside a body run inline.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body);

}  // namespace px
