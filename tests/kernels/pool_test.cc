#include <gtest/gtest.h>

#include "kernels/pool.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::directional_derivative_matches;
using testing::random_vector;

TEST(MaxPool, FastMatchesReferenceIncludingRaggedEdges) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (auto [N, C, H, W, k] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{
                                     1, 1, 1, 1, 1},
                                 {2, 3, 7, 5, 2}, {3, 5, 13, 17, 3}, {64, 32, 28, 28, 2}}) {
      auto x = random_vector(N * C * H * W, 1);
      const int64_t ny = N * C * (H / k) * (W / k);
      std::vector<float> y(ny), y_ref(ny);
      std::vector<int32_t> am(ny), am_ref(ny);
      maxpool2d(N, C, H, W, k, x.data(), y.data(), am.data());
      ref::maxpool2d(N, C, H, W, k, x.data(), y_ref.data(), am_ref.data());
      EXPECT_EQ(y, y_ref);
      EXPECT_EQ(am, am_ref);
    }
  }
}

TEST(MaxPool, TiesPickTheFirstElementOfTheWindow) {
  const std::vector<float> x = {1, 3, 3, 0,   // row 0
                                3, 2, 3, 3};  // row 1
  std::vector<float> y(2);
  std::vector<int32_t> am(2);
  maxpool2d(1, 1, 2, 4, 2, x.data(), y.data(), am.data());
  EXPECT_EQ(y, (std::vector<float>{3, 3}));
  EXPECT_EQ(am, (std::vector<int32_t>{1, 2}));
}

TEST(MaxPool, BackwardRoutesGradientToArgmaxOnly) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    const int64_t N = 3, C = 2, H = 9, W = 7, k = 2, Ho = H / k, Wo = W / k;
    auto x = random_vector(N * C * H * W, 2);
    auto dy = random_vector(N * C * Ho * Wo, 3);
    std::vector<float> y(dy.size()), dx(x.size(), NAN);
    std::vector<int32_t> am(dy.size());
    maxpool2d(N, C, H, W, k, x.data(), y.data(), am.data());
    maxpool2d_backward(N, C, H, W, k, am.data(), dy.data(), dx.data());
    for (int64_t p = 0; p < N * C; ++p)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          float expected = 0.0f;
          const int64_t oh = h / k, ow = w / k;
          if (oh < Ho && ow < Wo && am[(p * Ho + oh) * Wo + ow] == h * W + w)
            expected = dy[(p * Ho + oh) * Wo + ow];
          EXPECT_EQ(dx[(p * H + h) * W + w], expected) << "p=" << p << " h=" << h << " w=" << w;
        }
  }
}

TEST(MaxPool, BackwardMatchesFiniteDifferences) {
  const int64_t N = 2, C = 3, H = 8, W = 6, k = 2;
  auto x = random_vector(N * C * H * W, 4);
  const int64_t ny = N * C * (H / k) * (W / k);
  auto r = random_vector(ny, 5);
  auto loss = [&](const std::vector<float>& in) {
    std::vector<float> y(ny);
    std::vector<int32_t> am(ny);
    ref::maxpool2d(N, C, H, W, k, in.data(), y.data(), am.data());
    return testing::dot(r, y);
  };
  std::vector<float> y(ny), dx(x.size());
  std::vector<int32_t> am(ny);
  maxpool2d(N, C, H, W, k, x.data(), y.data(), am.data());
  maxpool2d_backward(N, C, H, W, k, am.data(), r.data(), dx.data());
  EXPECT_TRUE(directional_derivative_matches(loss, x, dx, 6, 1e-4));
}

}  // namespace
}  // namespace px::kernels
