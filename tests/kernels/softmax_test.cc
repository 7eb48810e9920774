#include <gtest/gtest.h>

#include "kernels/softmax.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::all_close;
using testing::directional_derivative_matches;
using testing::random_vector;

TEST(Softmax, FastMatchesReferenceOnPrimeSizes) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {13, 17}, {31, 64},
                              {1031, 13}, {67, 1031}}) {
      auto x = random_vector(rows * cols, 1, -20.0f, 20.0f), dy = random_vector(rows * cols, 2);
      std::vector<float> y(x.size()), y_ref(x.size()), dx(x.size()), dx_ref(x.size());
      softmax(rows, cols, x.data(), y.data());
      ref::softmax(rows, cols, x.data(), y_ref.data());
      EXPECT_TRUE(all_close(y, y_ref, 1e-5f, 1e-7f)) << rows << "x" << cols;
      softmax_backward(rows, cols, y_ref.data(), dy.data(), dx.data());
      ref::softmax_backward(rows, cols, y_ref.data(), dy.data(), dx_ref.data());
      EXPECT_TRUE(all_close(dx, dx_ref, 1e-4f, 1e-6f)) << rows << "x" << cols;
    }
  }
}

TEST(Softmax, IsStableForLargeLogitsAndWorksInPlace) {
  std::vector<float> x = {1000.0f, 1000.0f, -1000.0f, 0.0f, 88.0f, 89.0f};
  softmax(2, 3, x.data(), x.data());
  EXPECT_TRUE(all_close(x, {0.5f, 0.5f, 0.0f, 0.0f, 0.26894142f, 0.73105858f}, 1e-6f, 1e-7f));
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 5, cols = 17;
  auto x = random_vector(rows * cols, 3, -3.0f, 3.0f), r = random_vector(rows * cols, 4);
  auto loss = [&](const std::vector<float>& in) {
    std::vector<float> y(in.size());
    ref::softmax(rows, cols, in.data(), y.data());
    return testing::dot(r, y);
  };
  std::vector<float> y(x.size()), dx(x.size());
  ref::softmax(rows, cols, x.data(), y.data());
  softmax_backward(rows, cols, y.data(), r.data(), dx.data());
  EXPECT_TRUE(directional_derivative_matches(loss, x, dx, 5));
  ref::softmax_backward(rows, cols, y.data(), r.data(), dx.data());
  EXPECT_TRUE(directional_derivative_matches(loss, x, dx, 6));
}

}  // namespace
}  // namespace px::kernels
