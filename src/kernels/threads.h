// One knob for every kernel thread: parallax's own pool and OpenBLAS's.
#pragma once

namespace px::kernels {

// Sets the thread pool size and BLAS's thread count together (--threads N).
void set_threads(int threads);
int threads();

}  // namespace px::kernels
