// GEMM: OpenBLAS for the fast path, a triple loop for the reference.
#include "kernels/gemm.h"

#include <cblas.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/blas.h"
#include "kernels/gemm_parts.h"

namespace px::kernels {
namespace detail {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc) {
  PX_CHECK(M >= 0 && N >= 0 && K >= 0, "M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;
  PX_CHECK_GE(ldc, N);
  if (K == 0) {  // BLAS rejects lda < 1; the product is empty, so C = beta * C.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  PX_CHECK_GE(lda, trans_a ? M : K);
  PX_CHECK_GE(ldb, trans_b ? K : N);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

SerialBlasScope::SerialBlasScope() : saved_(openblas_get_num_threads()) {
  if (saved_ != 1) openblas_set_num_threads(1);
}

SerialBlasScope::~SerialBlasScope() {
  if (saved_ != 1) openblas_set_num_threads(saved_);
}

}  // namespace detail

// Large products are split across the px pool (rows of C, or columns when C
// is wide), each part a single-threaded BLAS call. Then one set of threads
// does all the kernel work: OpenBLAS's own workers would otherwise contend
// for the two cores with pool workers still spinning after the previous
// kernel. Parts are multiples of 16 rows/columns to keep BLAS's tiles whole.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  constexpr double kSplitFlops = 4.0e6;  // ~20 us of one core
  detail::gemm_in_parts<detail::SerialBlasScope>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                                                 kSplitFlops, detail::sgemm);
}

void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                  int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                  int64_t stride_c) {
  auto one = [&](int64_t i) {
    detail::sgemm(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb,
                  beta, C + i * stride_c, ldc);
  };
  // Many small products: one per pool thread, BLAS serial. Few large ones:
  // let BLAS thread each product.
  const double flops = 2.0 * static_cast<double>(M) * N * K;
  if (px::num_threads() > 1 && batch >= 2 * px::num_threads() && flops < 8.0e6) {
    detail::SerialBlasScope serial;
    px::parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
}

namespace ref {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        float a = trans_a ? A[k * lda + i] : A[i * lda + k];
        float b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        acc += static_cast<double>(a) * b;
      }
      float prior = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
      C[i * ldc + j] = alpha * static_cast<float>(acc) + prior;
    }
  }
}

}  // namespace ref
}  // namespace px::kernels
