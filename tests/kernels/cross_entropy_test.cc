#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cross_entropy.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::all_close;
using testing::directional_derivative_matches;
using testing::random_ids;
using testing::random_vector;

TEST(CrossEntropy, FastMatchesReferenceOnPrimeSizes) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (auto [N, V] : {std::pair<int64_t, int32_t>{1, 1}, {3, 7}, {13, 17}, {31, 64},
                        {2048, 257}, {67, 50257}}) {
      auto logits = random_vector(N * V, 1, -8.0f, 8.0f);
      auto targets = random_ids(N, V, 2);
      const float scale = 1.0f / static_cast<float>(N);
      std::vector<float> lse(N), lse_ref(N);
      const float loss = cross_entropy(N, V, logits.data(), targets.data(), scale, lse.data());
      const float loss_ref =
          ref::cross_entropy(N, V, logits.data(), targets.data(), scale, lse_ref.data());
      EXPECT_NEAR(loss, loss_ref, 1e-5f * std::fabs(loss_ref) + 1e-6f) << N << "x" << V;
      EXPECT_TRUE(all_close(lse, lse_ref, 1e-6f, 1e-6f));
      std::vector<float> d(N * V), d_ref(N * V);
      cross_entropy_backward(N, V, logits.data(), targets.data(), lse_ref.data(), scale, 0.7f,
                             d.data());
      ref::cross_entropy_backward(N, V, logits.data(), targets.data(), lse_ref.data(), scale,
                                  0.7f, d_ref.data());
      EXPECT_TRUE(all_close(d, d_ref, 1e-5f, 1e-9f)) << N << "x" << V;
    }
  }
}

TEST(CrossEntropy, UniformLogitsGiveLogV) {
  const int64_t N = 3, V = 11;
  std::vector<float> logits(N * V, 4.0f), lse(N);
  std::vector<int32_t> targets = {0, 5, 10};
  const float loss = cross_entropy(N, V, logits.data(), targets.data(), 1.0f / N, lse.data());
  EXPECT_NEAR(loss, std::log(11.0f), 1e-6f);
  EXPECT_NEAR(lse[1], 4.0f + std::log(11.0f), 1e-6f);
}

TEST(CrossEntropy, ScaledLossIsASumOverRowShards) {
  const int64_t N = 10, V = 13;
  auto logits = random_vector(N * V, 3, -3.0f, 3.0f);
  auto targets = random_ids(N, V, 4);
  std::vector<float> lse(N);
  const float whole = cross_entropy(N, V, logits.data(), targets.data(), 0.1f, lse.data());
  const float first = cross_entropy(4, V, logits.data(), targets.data(), 0.1f, lse.data());
  const float rest =
      cross_entropy(6, V, logits.data() + 4 * V, targets.data() + 4, 0.1f, lse.data());
  EXPECT_NEAR(whole, first + rest, 1e-6f);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  const int64_t N = 6, V = 19;
  auto logits = random_vector(N * V, 5, -3.0f, 3.0f);
  auto targets = random_ids(N, V, 6);
  const float scale = 0.25f, dloss = 1.5f;
  auto loss = [&](const std::vector<float>& in) {
    std::vector<float> lse(N);
    return dloss * static_cast<double>(
                       ref::cross_entropy(N, V, in.data(), targets.data(), scale, lse.data()));
  };
  std::vector<float> lse(N), d(N * V);
  cross_entropy(N, V, logits.data(), targets.data(), scale, lse.data());
  cross_entropy_backward(N, V, logits.data(), targets.data(), lse.data(), scale, dloss, d.data());
  EXPECT_TRUE(directional_derivative_matches(loss, logits, d, 7));
  ref::cross_entropy_backward(N, V, logits.data(), targets.data(), lse.data(), scale, dloss,
                              d.data());
  EXPECT_TRUE(directional_derivative_matches(loss, logits, d, 8));
}

}  // namespace
}  // namespace px::kernels
