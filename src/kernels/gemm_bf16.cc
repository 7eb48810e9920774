// bf16 GEMM: oneDNN's matmul for the fast path (kernels/dnnl_matmul.h), a
// double-precision loop over the widened inputs for the reference.
#include "kernels/gemm_bf16.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu_features.h"
#include "kernels/dnnl_matmul.h"
#include "kernels/gemm.h"
#include "kernels/gemm_parts.h"

namespace px::kernels {
namespace {

// C = beta * C: the whole product when K == 0 (oneDNN rejects empty dims).
void scale_output(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

// `rows` rows of `cols` floats, `ld` apart, rounded into `scratch` packed
// (leading dimension `cols`). One conversion over the whole block when it
// is contiguous (across the pool when large), else row by row.
const bf16* pack_rounded(int64_t rows, int64_t cols, const float* x, int64_t ld,
                         std::vector<bf16>& scratch) {
  const size_t size = static_cast<size_t>(rows * cols);
  if (scratch.size() < size) scratch.resize(size);
  if (ld == cols) {
    to_bf16(rows * cols, x, scratch.data());
  } else {
    for (int64_t r = 0; r < rows; ++r) to_bf16(cols, x + r * ld, scratch.data() + r * cols);
  }
  return scratch.data();
}

// An operand of `rows` x `cols` as a packed bf16 block (leading dimension
// `cols`): a packed bf16 operand as it is, any other rounded or copied into
// `scratch`. Always packed, because oneDNN picks its kernel, and with it the
// order of the fp32 sums, by the layout: an operand stored in bf16 must
// give the bits its fp32 original gives.
const bf16* packed(int64_t rows, int64_t cols, const Bf16Operand& x, std::vector<bf16>& scratch) {
  if (x.f32 != nullptr) return pack_rounded(rows, cols, x.f32, x.ld, scratch);
  if (x.ld == cols || rows <= 1) return x.rounded;
  const size_t size = static_cast<size_t>(rows * cols);
  if (scratch.size() < size) scratch.resize(size);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(x.rounded + r * x.ld, x.rounded + r * x.ld + cols, scratch.data() + r * cols);
  return scratch.data();
}

}  // namespace

void gemm_mixed_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, Bf16Operand A,
                     Bf16Operand B, float beta, float* C, int64_t ldc) {
  require_avx512_bf16("bf16 GEMM");
  PX_CHECK(M >= 0 && N >= 0 && K >= 0, "M={} N={} K={}", M, N, K);
  PX_CHECK((A.f32 == nullptr) != (A.rounded == nullptr) && (B.f32 == nullptr) != (B.rounded == nullptr),
           "gemm_mixed_bf16: each operand is fp32 or bf16, not both or neither");
  // Kept per thread: the graph's GEMMs repeat the same sizes every step, so
  // after the first step no call allocates (a fresh multi-MB buffer would
  // be page-faulted in on every call). At most the largest operand pair a
  // thread has multiplied stays allocated.
  thread_local std::vector<bf16> scratch_a, scratch_b;
  const int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  const bf16* a = packed(trans_a ? K : M, a_cols, A, scratch_a);
  const bf16* b = packed(trans_b ? N : K, b_cols, B, scratch_b);
  const int64_t lda = std::max<int64_t>(a_cols, 1), ldb = std::max<int64_t>(b_cols, 1);
  gemm_bf16(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
}

void gemm_bias_mixed_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Bf16Operand A,
                          Bf16Operand B, const float* bias, Bf16Output C) {
  require_avx512_bf16("bf16 GEMM");
  PX_CHECK(M >= 0 && N >= 0 && K >= 0, "M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;
  PX_CHECK((C.f32 == nullptr) != (C.rounded == nullptr), "gemm_bias_mixed_bf16: C is fp32 or bf16, not both or neither");
  PX_CHECK_GE(C.ld, N);
  if (K == 0) {  // oneDNN rejects empty dims: C is the bias alone
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const float value = bias != nullptr ? bias[j] : 0.0f;
        if (C.f32 != nullptr) C.f32[i * C.ld + j] = value;
        else C.rounded[i * C.ld + j] = to_bf16(value);
      }
    return;
  }
  PX_CHECK((A.f32 == nullptr) != (A.rounded == nullptr) && (B.f32 == nullptr) != (B.rounded == nullptr),
           "gemm_bias_mixed_bf16: each operand is fp32 or bf16, not both or neither");
  thread_local std::vector<bf16> scratch_a, scratch_b;  // as gemm_mixed_bf16's
  const int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  const bf16* a = packed(trans_a ? K : M, a_cols, A, scratch_a);
  const bf16* b = packed(trans_b ? N : K, b_cols, B, scratch_b);
  const int64_t lda = std::max<int64_t>(a_cols, 1), ldb = std::max<int64_t>(b_cols, 1);
  // gemm_bf16's split over the pool; a part that starts at column j of C
  // (C + j: a column split; a row split starts at C + i * ldc, column 0)
  // adds the bias from bias + j.
  constexpr double kSplitFlops = 2e7;
  auto parts = [&](auto* c) {
    using Out = std::remove_const_t<std::remove_pointer_t<decltype(c)>>;
    auto kernel = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, float, const bf16* pa, int64_t la,
                      const bf16* pb, int64_t lb, float, Out* pc, int64_t lc) {
      const int64_t column = (pc - c) % lc;
      detail::matmul_bf16_bias(ta, tb, m, n, k, pa, la, pb, lb, bias != nullptr ? bias + column : nullptr, pc, lc,
                               std::is_same_v<Out, bf16>);
    };
    detail::gemm_in_parts<detail::NoPartsScope>(trans_a, trans_b, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, C.ld,
                                                kSplitFlops, kernel);
  };
  if (C.f32 != nullptr) parts(C.f32);
  else parts(C.rounded);
}

void gemm_batched_mixed_bf16(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                             float alpha, Bf16Operand A, int64_t stride_a, Bf16Operand B, int64_t stride_b,
                             float beta, float* C, int64_t ldc, int64_t stride_c) {
  auto advanced = [](const Bf16Operand& x, int64_t offset) {
    return x.rounded != nullptr ? Bf16Operand{.rounded = x.rounded + offset, .ld = x.ld}
                                : Bf16Operand{.f32 = x.f32 + offset, .ld = x.ld};
  };
  auto one = [&](int64_t i) {
    gemm_mixed_bf16(trans_a, trans_b, M, N, K, alpha, advanced(A, i * stride_a), advanced(B, i * stride_b), beta,
                    C + i * stride_c, ldc);
  };
  // kernels::gemm_batched's rule: many small products spread over the pool
  // (each then runs inline, single-threaded), few large ones split each.
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  if (px::num_threads() > 1 && batch >= 2 * px::num_threads() && flops < 8.0e6) {
    px::parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
}

// As kernels::gemm does for fp32: a large product is split across the px
// pool (rows of C, or columns when C is wide), each part one single-threaded
// oneDNN call, so one set of threads does all the kernel work. Parts are
// multiples of 16 rows/columns, whole AMX and AVX-512 tiles.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  require_avx512_bf16("bf16 GEMM");
  PX_CHECK(M >= 0 && N >= 0 && K >= 0, "M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;
  PX_CHECK_GE(ldc, N);
  if (K == 0) return scale_output(M, N, beta, C, ldc);
  PX_CHECK_GE(lda, trans_a ? M : K);
  PX_CHECK_GE(ldb, trans_b ? K : N);
  constexpr double kSplitFlops = 2e7;  // ~20 us of one core at the bf16 rate (AMX, ~1 TFLOP/s)
  detail::gemm_in_parts<detail::NoPartsScope>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                                              kSplitFlops, detail::matmul_bf16);
}

namespace ref {

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  if (M == 0 || N == 0) return;
  // The bf16 values widened exactly, then the fp32 reference GEMM (double accumulation).
  auto widened = [](const bf16* x, int64_t rows, int64_t cols, int64_t ld) {
    std::vector<float> out(rows == 0 || cols == 0 ? 0 : static_cast<size_t>((rows - 1) * ld + cols));
    for (size_t i = 0; i < out.size(); ++i) out[i] = to_float(x[i]);
    return out;
  };
  const std::vector<float> a = widened(A, trans_a ? K : M, trans_a ? M : K, lda);
  const std::vector<float> b = widened(B, trans_b ? N : K, trans_b ? K : N, ldb);
  ref::gemm(trans_a, trans_b, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc);
}

void gemm_bias_mixed_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Bf16Operand A,
                          Bf16Operand B, const float* bias, Bf16Output C) {
  if (M == 0 || N == 0) return;
  // Each operand as the fp32 values of its bf16 rounding, packed.
  auto widened = [](const Bf16Operand& x, int64_t rows, int64_t cols) {
    std::vector<float> out(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[static_cast<size_t>(r * cols + c)] =
            x.f32 != nullptr ? to_float(kernels::to_bf16(x.f32[r * x.ld + c])) : to_float(x.rounded[r * x.ld + c]);
    return out;
  };
  const int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  const std::vector<float> a = widened(A, trans_a ? K : M, a_cols), b = widened(B, trans_b ? N : K, b_cols);
  std::vector<float> c(static_cast<size_t>(M * N));
  ref::gemm(trans_a, trans_b, M, N, K, 1.0f, a.data(), std::max<int64_t>(a_cols, 1), b.data(),
            std::max<int64_t>(b_cols, 1), 0.0f, c.data(), N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const float value = c[static_cast<size_t>(i * N + j)] + (bias != nullptr ? bias[j] : 0.0f);
      if (C.f32 != nullptr) C.f32[i * C.ld + j] = value;
      else C.rounded[i * C.ld + j] = kernels::to_bf16(value);
    }
}

}  // namespace ref
}  // namespace px::kernels
