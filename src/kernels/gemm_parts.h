// One GEMM run as parts over the thread pool, for the fp32 (gemm.cc) and
// bf16 (gemm_bf16.cc) GEMMs alike: C's rows (M >= N) or columns cut into
// `px::num_threads()` parts, each a multiple of 16 rows or columns so the
// library's tiles stay whole, each part one call of `kernel` with the
// operands offset to it. Below `split_flops` (about 20 us of one core at
// the kernel's rate), or with one thread or fewer than 32 rows/columns, the
// whole product is one call: waking the pool would cost more.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace px::kernels::detail {

// No scope: the kernel needs nothing set while its parts run.
struct NoPartsScope {};

// kernel(trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc).
// A PartsScope lives while the parts run (fp32: OpenBLAS kept to one
// thread a part). C is fp32, or bf16 for a kernel that rounds its output.
template <typename PartsScope, typename In, typename Out, typename Kernel>
void gemm_in_parts(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const In* A,
                   int64_t lda, const In* B, int64_t ldb, float beta, Out* C, int64_t ldc, double split_flops,
                   const Kernel& kernel) {
  const int parts = px::num_threads();
  const bool split_rows = M >= N;
  const int64_t length = split_rows ? M : N;
  if (parts <= 1 || 2.0 * static_cast<double>(M) * N * K < split_flops || length < 32) {
    kernel(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  auto bound = [&](int64_t part) { return part >= parts ? length : (length * part / parts) / 16 * 16; };
  [[maybe_unused]] const PartsScope scope;
  px::parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t part = lo; part < hi; ++part) {
      const int64_t a = bound(part), b = bound(part + 1);
      if (a >= b) continue;
      if (split_rows)
        kernel(trans_a, trans_b, b - a, N, K, alpha, trans_a ? A + a : A + a * lda, lda, B, ldb, beta, C + a * ldc,
               ldc);
      else
        kernel(trans_a, trans_b, M, b - a, K, alpha, A, lda, trans_b ? B + a * ldb : B + a, ldb, beta, C + a, ldc);
    }
  });
}

}  // namespace px::kernels::detail
