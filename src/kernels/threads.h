// One knob for every kernel thread: parallax's own pool, OpenBLAS's and
// oneDNN's. BLAS and oneDNN run one thread per call; large GEMMs are split
// across the pool instead (kernels/gemm.cc, kernels/gemm_bf16.cc).
#pragma once

namespace px::kernels {

// Sets the thread pool size and BLAS's thread count together (--threads N).
void set_threads(int threads);
int threads();

}  // namespace px::kernels
