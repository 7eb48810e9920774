// Internal to src/kernels: the thin layer between kernels and OpenBLAS.
//  - sgemm(): row-major cblas_sgemm with the degenerate sizes BLAS rejects
//    (K == 0, leading dims < 1) handled here.
//  - SerialBlasScope: while alive, OpenBLAS runs single-threaded, so kernels
//    that parallelize over independent GEMMs with parallel_for do not also
//    ask BLAS for threads (oversubscription on a 2-core box).
#pragma once

#include <cstdint>

namespace px::kernels::detail {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc);

class SerialBlasScope {
 public:
  SerialBlasScope();
  ~SerialBlasScope();
  SerialBlasScope(const SerialBlasScope&) = delete;
  SerialBlasScope& operator=(const SerialBlasScope&) = delete;

 private:
  int saved_;
};

}  // namespace px::kernels::detail
