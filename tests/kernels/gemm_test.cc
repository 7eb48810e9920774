#include <gtest/gtest.h>

#include "kernels/gemm.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

struct GemmCase {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
};

// Runs fast and reference GEMM with padded leading dims and compares.
void expect_gemm_matches(const GemmCase& c, int64_t pad, uint64_t seed) {
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = c.N + pad;
  auto A = random_vector(a_rows * lda, seed);
  auto B = random_vector(b_rows * ldb, seed + 1);
  auto C = random_vector(c.M * ldc, seed + 2);
  auto expected = C;
  gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
  ref::gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
            expected.data(), ldc);
  EXPECT_TRUE(all_close(C, expected, 1e-4f, 1e-4f))
      << "ta=" << c.ta << " tb=" << c.tb << " M=" << c.M << " N=" << c.N << " K=" << c.K;
}

TEST(Gemm, FastMatchesReferenceForAllTransposesOnPrimeSizes) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    uint64_t seed = 1;
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 7, 13},
                               {17, 31, 64}, {64, 13, 7}, {129, 67, 131}})
          for (int64_t pad : {0, 3})
            expect_gemm_matches({ta, tb, M, N, K, 0.7f, 0.0f}, pad, seed++);
  }
}

TEST(Gemm, AccumulatesWithBeta) {
  for (float beta : {1.0f, -0.5f})
    expect_gemm_matches({false, true, 13, 17, 31, 1.0f, beta}, 1, 99);
}

TEST(Gemm, EmptyDepthScalesOutputByBeta) {
  std::vector<float> C = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  gemm(false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.5f, C.data(), 3);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f}));
}

TEST(Gemm, ReferenceComputesKnownProduct) {
  // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]
  std::vector<float> A = {1, 2, 3, 4}, B = {5, 6, 7, 8}, C(4);
  ref::gemm(false, false, 2, 2, 2, 1.0f, A.data(), 2, B.data(), 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{19, 22, 43, 50}));
  ref::gemm(true, false, 2, 2, 2, 1.0f, A.data(), 2, B.data(), 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{26, 30, 38, 44}));
}

TEST(GemmBatched, MatchesPerItemReferenceAtBothThreadCounts) {
  testing::ThreadReset reset;
  const int64_t batch = 7, M = 13, N = 17, K = 31;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (bool tb : {false, true}) {
      const int64_t sa = M * K + 5, sb = K * N + 3, sc = M * N + 1;
      auto A = random_vector(batch * sa, 1), B = random_vector(batch * sb, 2);
      auto C = random_vector(batch * sc, 3);
      auto expected = C;
      gemm_batched(batch, false, tb, M, N, K, 1.0f, A.data(), K, sa, B.data(), tb ? K : N, sb,
                   0.0f, C.data(), N, sc);
      for (int64_t i = 0; i < batch; ++i)
        ref::gemm(false, tb, M, N, K, 1.0f, A.data() + i * sa, K, B.data() + i * sb, tb ? K : N,
                  0.0f, expected.data() + i * sc, N);
      EXPECT_TRUE(all_close(C, expected, 1e-4f, 1e-4f)) << "threads=" << threads;
    }
  }
}

}  // namespace
}  // namespace px::kernels
