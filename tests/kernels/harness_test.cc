// The comparison helpers themselves must be able to fail, or every test built
// on them could pass vacuously.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"

namespace px::kernels {
namespace {

TEST(Harness, DirectionalCheckAcceptsTrueGradientAndRejectsSlightlyWrongOne) {
  // loss(x) = sum_i r_i x_i^2, gradient 2 r_i x_i.
  const auto x = testing::random_vector(50, 1), r = testing::random_vector(50, 2);
  auto loss = [&](const std::vector<float>& in) {
    double s = 0;
    for (size_t i = 0; i < in.size(); ++i) s += static_cast<double>(r[i]) * in[i] * in[i];
    return s;
  };
  std::vector<float> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) grad[i] = 2.0f * r[i] * x[i];
  EXPECT_TRUE(testing::directional_derivative_matches(loss, x, grad, 3));
  grad[7] *= 1.5f;  // one wrong component
  EXPECT_FALSE(testing::directional_derivative_matches(loss, x, grad, 3));
}

TEST(Harness, AllCloseRejectsOneOutlierAndSizeMismatch) {
  std::vector<float> a = {1.0f, 2.0f, 3.0f}, b = a;
  EXPECT_TRUE(testing::all_close(a, b, 1e-6f, 0.0f));
  b[2] = 3.001f;
  EXPECT_FALSE(testing::all_close(a, b, 1e-6f, 1e-6f));
  EXPECT_FALSE(testing::all_close(a, {1.0f, 2.0f}, 1.0f, 1.0f));
  EXPECT_FALSE(testing::all_close({NAN}, {NAN}, 1.0f, 1.0f));  // NaN never passes
}

}  // namespace
}  // namespace px::kernels
