// Which of OpenBLAS's CPU-specific kernels parallax's GEMMs run on.
//
// OpenBLAS picks its kernels when it loads, from the CPU it detects. The
// 0.3.21 that Debian ships does not know AMD Zen 4 and falls back to its
// Haswell (AVX2) kernels, although Zen 4 runs the Skylake-X (AVX-512)
// kernels correctly and about twice as fast (sgemm ~210 vs ~107 GFLOP/s on
// one core here). parallax re-selects once, before its first GEMM.
#pragma once

#include <string>

namespace px::kernels {

// Selects the best kernels the first time it is called (from set_threads and
// from every GEMM); afterwards a cheap check. Always returns true.
bool blas_kernels_selected();
// The OpenBLAS kernel set in use, e.g. "SkylakeX" or "Haswell".
std::string blas_kernel_name();

}  // namespace px::kernels
