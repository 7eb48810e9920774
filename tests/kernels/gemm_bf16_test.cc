// bf16 GEMM against the fp32 reference GEMM run on the same bf16-rounded
// inputs, widened back to fp32.
//
// The bound. With a, b bf16 values (8 significant bits each), every product
// a*b has at most 16 significant bits and is exact in fp32 (24 bits), so
// the inputs and the products contribute no error: only the fp32 sums do.
// Whatever order and blocking the kernel sums in (AMX tiles, VDPBF16PS
// pairs, K split into panels), C[i,j] is K products added by K-1 or fewer
// fp32 additions, then alpha * acc and + beta * C: at most K+2 roundings on
// any path from an input to C. Higham's bound for summation in any order
// (Accuracy and Stability of Numerical Algorithms, 2nd ed., §4.2, §3.1):
//   |C_fast - C_exact| <= gamma(K+2) * S,   gamma(n) = n u / (1 - n u),
//   S = |alpha| sum_k |a_ik b_kj| + |beta C0_ij|,  u = 2^-24 (fp32 unit roundoff).
// The reference sums in double (error ~K 2^-53 S, negligible) and rounds
// the same three times at the end (float(acc), * alpha, + beta C0): within
// 3u S of exact. So |C_fast - C_ref| <= gamma(K+5) * S. S is computed per
// element from |A| and |B|: a bound relative to |C| alone would not hold
// where the terms cancel. (K = 1000: gamma ~ 6e-5.)
// Values are drawn in [-1, 1]: the hardware's flush of denormal sums (below
// 2^-126) does not arise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/bf16.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::random_vector;

struct Case {
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha, beta;
  int64_t pad;  // added to every leading dimension
};

// `values` rounded to bf16, and the same values widened back to fp32.
struct Rounded {
  std::vector<bf16> narrow;
  std::vector<float> wide;
};

Rounded rounded(std::vector<float> values) {
  Rounded r{std::vector<bf16>(values.size()), std::move(values)};
  ref::to_bf16(int64_t(r.wide.size()), r.wide.data(), r.narrow.data());
  ref::to_float(int64_t(r.wide.size()), r.narrow.data(), r.wide.data());
  return r;
}

std::vector<float> absolute(std::vector<float> v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}

::testing::AssertionResult matches_reference(const Case& c, uint64_t seed) {
  const int64_t a_rows = c.trans_a ? c.K : c.M, a_cols = c.trans_a ? c.M : c.K;
  const int64_t b_rows = c.trans_b ? c.N : c.K, b_cols = c.trans_b ? c.K : c.N;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  const Rounded A = rounded(random_vector(a_rows * lda, seed));
  const Rounded B = rounded(random_vector(b_rows * ldb, seed + 1));
  const std::vector<float> C0 = random_vector(c.M * ldc, seed + 2);
  std::vector<float> fast = C0, expected = C0, magnitude = absolute(C0);
  gemm_bf16(c.trans_a, c.trans_b, c.M, c.N, c.K, c.alpha, A.narrow.data(), lda, B.narrow.data(), ldb,
            c.beta, fast.data(), ldc);
  ref::gemm(c.trans_a, c.trans_b, c.M, c.N, c.K, c.alpha, A.wide.data(), lda, B.wide.data(), ldb, c.beta,
            expected.data(), ldc);
  // S = |alpha| |A| |B| + |beta| |C0|, by the same reference GEMM.
  ref::gemm(c.trans_a, c.trans_b, c.M, c.N, c.K, std::fabs(c.alpha), absolute(A.wide).data(), lda,
            absolute(B.wide).data(), ldb, std::fabs(c.beta), magnitude.data(), ldc);
  const double u = std::ldexp(1.0, -24), n = double(c.K + 5);
  const double gamma = n * u / (1.0 - n * u);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      const int64_t at = i * ldc + j;
      const double error = std::fabs(double(fast[at]) - expected[at]);
      // The sum S itself was rounded a few times: 1.01 covers it.
      if (!(error <= 1.01 * gamma * magnitude[at]))
        return ::testing::AssertionFailure()
               << "C[" << i << "," << j << "] = " << fast[at] << ", reference " << expected[at]
               << ", error " << error << " > bound " << gamma * magnitude[at];
    }
  for (int64_t i = 0; i < c.M; ++i)  // the padding between rows is not written
    for (int64_t j = c.N; j < ldc; ++j)
      if (fast[i * ldc + j] != C0[i * ldc + j])
        return ::testing::AssertionFailure() << "wrote padding at [" << i << "," << j << "]";
  return ::testing::AssertionSuccess();
}

class GemmBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16: gemm_bf16 refuses to run";
  }
  testing::ThreadReset reset_;
};

// NN, NT, TN (the graph's layouts) and TT, on every combination of the odd
// sizes {1, 7, 33, 1000} with at most one 1000 (runtime), at 1 and 2 threads.
TEST_F(GemmBf16, MatchesFp32ReferenceInEveryLayoutOnOddShapes) {
  const std::vector<int64_t> sizes = {1, 7, 33, 1000};
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    uint64_t seed = 1;
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int64_t M : sizes)
          for (int64_t N : sizes)
            for (int64_t K : sizes) {
              if ((M == 1000) + (N == 1000) + (K == 1000) > 1) continue;
              const Case c{ta, tb, M, N, K, 1.0f, 0.0f, (M + N + K) % 3};
              EXPECT_TRUE(matches_reference(c, seed++))
                  << "threads=" << threads << " ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N
                  << " K=" << K << " pad=" << c.pad;
            }
  }
}

// Batched: each product gemm_mixed_bf16's, against the reference GEMM of
// the rounded inputs, item by item; fp32 operands and bf16-stored ones alike.
TEST_F(GemmBf16, BatchedMixedMatchesTheReferencePerProduct) {
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (auto [batch, ta, tb, M, N, K] : {std::tuple<int64_t, bool, bool, int64_t, int64_t, int64_t>{7, false, true, 33, 17, 64},
                                         {5, false, false, 9, 40, 7}, {4, true, false, 6, 11, 33}, {1, false, false, 1, 1, 1}}) {
      const int64_t a_size = M * K, b_size = K * N;
      const Rounded A = rounded(random_vector(batch * a_size, 40)), B = rounded(random_vector(batch * b_size, 41));
      std::vector<float> fast(static_cast<size_t>(batch * M * N)), from_bf16 = fast;
      gemm_batched_mixed_bf16(batch, ta, tb, M, N, K, 1.0f, {.f32 = A.wide.data(), .ld = ta ? M : K}, a_size,
                              {.f32 = B.wide.data(), .ld = tb ? K : N}, b_size, 0.0f, fast.data(), N, M * N);
      gemm_batched_mixed_bf16(batch, ta, tb, M, N, K, 1.0f, {.rounded = A.narrow.data(), .ld = ta ? M : K}, a_size,
                              {.rounded = B.narrow.data(), .ld = tb ? K : N}, b_size, 0.0f, from_bf16.data(), N, M * N);
      EXPECT_EQ(fast, from_bf16) << "an operand stored in bf16 gives its fp32 original's bits";
      const double u = std::ldexp(1.0, -24), n = double(K + 5), gamma = n * u / (1.0 - n * u);
      for (int64_t i = 0; i < batch; ++i) {
        std::vector<float> expected(static_cast<size_t>(M * N)), magnitude(static_cast<size_t>(M * N));
        ref::gemm(ta, tb, M, N, K, 1.0f, A.wide.data() + i * a_size, ta ? M : K, B.wide.data() + i * b_size,
                  tb ? K : N, 0.0f, expected.data(), N);
        const std::vector<float> a = absolute({A.wide.begin() + i * a_size, A.wide.begin() + (i + 1) * a_size});
        const std::vector<float> b = absolute({B.wide.begin() + i * b_size, B.wide.begin() + (i + 1) * b_size});
        ref::gemm(ta, tb, M, N, K, 1.0f, a.data(), ta ? M : K, b.data(), tb ? K : N, 0.0f, magnitude.data(), N);
        for (int64_t j = 0; j < M * N; ++j)
          EXPECT_LE(std::fabs(double(fast[static_cast<size_t>(i * M * N + j)]) - expected[static_cast<size_t>(j)]),
                    1.01 * gamma * magnitude[static_cast<size_t>(j)])
              << "product " << i << " [" << j << "] threads=" << threads;
      }
    }
  }
}

TEST_F(GemmBf16, SplitsLargeProductsAcrossThreadsBothWays) {
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    // Tall C splits by rows, wide C by columns; 1000 is not a multiple of 16.
    EXPECT_TRUE(matches_reference({false, true, 1000, 64, 257, 1.0f, 0.0f, 1}, 11)) << threads;
    EXPECT_TRUE(matches_reference({true, false, 64, 1000, 257, 1.0f, 0.0f, 2}, 12)) << threads;
    EXPECT_TRUE(matches_reference({true, true, 333, 1000, 100, 1.0f, 0.0f, 0}, 13)) << threads;
  }
}

int64_t threads_in_process() {
  return std::distance(std::filesystem::directory_iterator("/proc/self/task"), std::filesystem::directory_iterator());
}

// oneDNN runs on OpenMP, which would start a team of its own (kept for the
// process' life) on any thread that calls it; the kernels' thread count
// must be the only one. CTest runs each case in a process of its own, so
// no earlier case has started such a team.
TEST_F(GemmBf16, StartsNoThreadsBeyondThePool) {
  set_threads(2);
  px::parallel_for(0, 2, 1, [](int64_t, int64_t) {});  // the pool's worker is up
  const int64_t before = threads_in_process();
  // Both halves of this product run in the pool, one on the pool's worker.
  ASSERT_TRUE(matches_reference({false, false, 512, 512, 512, 1.0f, 0.0f, 0}, 31));
  EXPECT_EQ(threads_in_process(), before);
}

TEST_F(GemmBf16, ScalesByAlphaAndAccumulatesWithBeta) {
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (auto [alpha, beta] : {std::pair{1.0f, 1.0f}, {0.125f, 1.0f}, {-0.7f, -0.5f}, {2.0f, 0.0f}})
      for (bool tb : {false, true})
        EXPECT_TRUE(matches_reference({false, tb, 129, 67, 131, alpha, beta, 3}, 21))
            << "alpha=" << alpha << " beta=" << beta << " tb=" << tb;
  }
}

TEST_F(GemmBf16, EmptyDepthScalesOutputByBeta) {
  std::vector<float> C = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  gemm_bf16(false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.5f, C.data(), 3);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f}));
  gemm_bf16(false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.0f, C.data(), 3);
  EXPECT_EQ(C, std::vector<float>(6, 0.0f));
}

// Exactly representable data: small integers times powers of two, sums far
// below 2^24, so every kernel must give the exact product.
TEST_F(GemmBf16, ComputesKnownProductExactly) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {0.5f, -1, 2, 0.25f, 8, -4};  // A [2,3], B [3,2]
  std::vector<bf16> A(a.size()), B(b.size());
  to_bf16(6, a.data(), A.data());
  to_bf16(6, b.data(), B.data());
  std::vector<float> C(4, 99.0f);
  gemm_bf16(false, false, 2, 2, 3, 1.0f, A.data(), 3, B.data(), 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{28.5f, -12.5f, 60.0f, -26.75f}));
  ref::gemm_bf16(false, false, 2, 2, 3, 1.0f, A.data(), 3, B.data(), 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{28.5f, -12.5f, 60.0f, -26.75f}));
}

// The GEMM with the bias in its epilogue (a linear layer's forward), fp32
// and bf16 operands, fp32 and bf16 outputs, against its reference (the
// rounded operands, the reference GEMM, + bias, then the output's one
// rounding). The fp32 bound is the one above with one more rounding (+ bias)
// and the bias in S: gamma(K+6) (S + |bias|). A bf16 output rounds two fp32
// values within that bound: they may land on neighbouring bf16 values, one
// bf16 ulp apart, at most 2^-7 of the larger. Also: the epilogue changes no
// bit against the unfused path (gemm_mixed_bf16, then + bias in fp32, then
// the rounding), which is what lets the lowering fuse the two nodes without
// changing a result.
TEST_F(GemmBf16, BiasInTheEpilogueMatchesTheReferenceAndTheUnfusedPath) {
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    uint64_t seed = 50;
    for (auto [ta, tb, M, N, K] : {std::tuple<bool, bool, int64_t, int64_t, int64_t>{false, false, 33, 7, 1000},
                                   {false, false, 1, 1, 1}, {false, false, 1000, 33, 7}, {false, false, 64, 1000, 33},
                                   {false, true, 129, 67, 131}, {true, false, 7, 33, 1}, {false, false, 5, 9, 0}})
      for (bool with_bias : {true, false})
        for (bool stored : {false, true})
          for (bool out_bf16 : {false, true}) {
            const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
            const int64_t lda = a_cols + 1, ldb = b_cols + 2, ldc = N + 1;
            // At least one element, so that K = 0 passes non-null operands.
            const Rounded A = rounded(random_vector(std::max<int64_t>(a_rows * lda, 1), seed));
            const Rounded B = rounded(random_vector(std::max<int64_t>(b_rows * ldb, 1), seed + 1));
            const std::vector<float> bias = random_vector(N, seed + 2);
            seed += 3;
            const Bf16Operand a = stored ? Bf16Operand{.rounded = A.narrow.data(), .ld = lda}
                                         : Bf16Operand{.f32 = A.wide.data(), .ld = lda};
            const Bf16Operand b = stored ? Bf16Operand{.rounded = B.narrow.data(), .ld = ldb}
                                         : Bf16Operand{.f32 = B.wide.data(), .ld = ldb};
            const float* bias_row = with_bias ? bias.data() : nullptr;
            std::vector<float> fast(static_cast<size_t>(M * ldc), 7.0f), expected = fast;
            std::vector<bf16> fast_bf16(fast.size(), to_bf16(7.0f)), expected_bf16 = fast_bf16;
            const Bf16Output fast_out = out_bf16 ? Bf16Output{.rounded = fast_bf16.data(), .ld = ldc}
                                                 : Bf16Output{.f32 = fast.data(), .ld = ldc};
            const Bf16Output expected_out = out_bf16 ? Bf16Output{.rounded = expected_bf16.data(), .ld = ldc}
                                                     : Bf16Output{.f32 = expected.data(), .ld = ldc};
            gemm_bias_mixed_bf16(ta, tb, M, N, K, a, b, bias_row, fast_out);
            ref::gemm_bias_mixed_bf16(ta, tb, M, N, K, a, b, bias_row, expected_out);
            // The unfused path, per element.
            std::vector<float> unfused(static_cast<size_t>(M * ldc), 0.0f), magnitude = unfused;
            gemm_mixed_bf16(ta, tb, M, N, K, 1.0f, a, b, 0.0f, unfused.data(), ldc);
            ref::gemm(ta, tb, M, N, K, 1.0f, absolute(A.wide).data(), lda, absolute(B.wide).data(), ldb, 0.0f,
                      magnitude.data(), ldc);
            const double u = std::ldexp(1.0, -24), n = double(K + 6), gamma = n * u / (1.0 - n * u);
            const std::string where = "threads=" + std::to_string(threads) + " ta=" + std::to_string(ta) +
                                      " tb=" + std::to_string(tb) + " M=" + std::to_string(M) + " N=" +
                                      std::to_string(N) + " K=" + std::to_string(K) + " bias=" +
                                      std::to_string(with_bias) + " stored=" + std::to_string(stored) +
                                      " out_bf16=" + std::to_string(out_bf16);
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < ldc; ++j) {
                const size_t at = static_cast<size_t>(i * ldc + j);
                if (j == N) {  // the padding between rows is not written
                  ASSERT_EQ(fast[at], 7.0f) << where;
                  ASSERT_EQ(fast_bf16[at], to_bf16(7.0f)) << where;
                  continue;
                }
                const float with = unfused[at] + (with_bias ? bias[static_cast<size_t>(j)] : 0.0f);
                const double bound = 1.01 * gamma * (magnitude[at] + (with_bias ? std::fabs(bias[static_cast<size_t>(j)]) : 0.0));
                if (out_bf16) {
                  const float got = to_float(fast_bf16[at]), want = to_float(expected_bf16[at]);
                  ASSERT_LE(std::fabs(double(got) - want),
                            bound + std::ldexp(std::max(std::fabs(got), std::fabs(want)), -7))
                      << where << " at [" << i << "," << j << "]";
                  ASSERT_EQ(fast_bf16[at], to_bf16(with)) << where << " at [" << i << "," << j << "]: unfused";
                } else {
                  ASSERT_LE(std::fabs(double(fast[at]) - expected[at]), bound) << where << " at [" << i << "," << j << "]";
                  ASSERT_EQ(fast[at], with) << where << " at [" << i << "," << j << "]: unfused";
                }
              }
          }
  }
}

TEST(GemmBf16Reference, AgreesWithFp32ReferenceOnWidenedInputs) {
  const Rounded A = rounded(random_vector(37 * 41, 3)), B = rounded(random_vector(41 * 29, 4));
  std::vector<float> C(37 * 29, 0.0f), expected = C;
  ref::gemm_bf16(false, false, 37, 29, 41, 1.0f, A.narrow.data(), 41, B.narrow.data(), 29, 0.0f, C.data(), 29);
  ref::gemm(false, false, 37, 29, 41, 1.0f, A.wide.data(), 41, B.wide.data(), 29, 0.0f, expected.data(), 29);
  EXPECT_EQ(C, expected);
}

}  // namespace
}  // namespace px::kernels
