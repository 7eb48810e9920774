// The AMX bf16 micro-kernel (kernels/amx_gemm.h) against products in
// double of the same bf16 values, at the sizes the attention tiles use
// and at their edges (16-row and 16-column halves).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/amx_gemm.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

std::vector<bf16> rounded_random(int64_t n, uint64_t seed) {
  const std::vector<float> x = testing::random_vector(n, seed, -2.0f, 2.0f);
  std::vector<bf16> out(x.size());
  to_bf16(n, x.data(), out.data());
  return out;
}

TEST(AmxGemm, MatchesDoubleProductsOfTheSameBf16Values) {
  if (!amx_bf16_ready()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or the kernel refused the tile data)";
  for (const auto& [M, N, K] : {std::tuple{16, 16, 32}, std::tuple{32, 32, 64}, std::tuple{48, 16, 32},
                                std::tuple{16, 48, 96}, std::tuple{128, 256, 64}, std::tuple{128, 64, 256}}) {
    const std::vector<bf16> a = rounded_random(M * K, 1), b = rounded_random(K * N, 2);
    std::vector<uint32_t> packed(static_cast<size_t>(K / 2 * N));
    vnni_pack(K, N, b.data(), N, packed.data(), N);
    for (bool accumulate : {false, true}) {
      std::vector<float> c(static_cast<size_t>(M * N), 0.5f);
      amx_gemm_bf16(M, N, K, a.data(), K, packed.data(), N, c.data(), N, accumulate);
      double worst = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double expected = accumulate ? 0.5 : 0.0;
          for (int64_t k = 0; k < K; ++k) expected += double(to_float(a[m * K + k])) * to_float(b[k * N + n]);
          worst = std::max(worst, std::abs(c[m * N + n] - expected) / std::max(1.0, std::abs(expected)));
        }
      EXPECT_LE(worst, 1e-5) << "M=" << M << " N=" << N << " K=" << K << (accumulate ? " accumulate" : "");
    }
  }
}

}  // namespace
}  // namespace px::kernels
