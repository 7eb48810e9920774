#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "kernels/dropout.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::random_vector;

TEST(Dropout, MaskFollowsCounterUniformAndScalesKeptValues) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (int64_t n : {1, 7, 31, 100003}) {
      const float p = 0.3f;
      auto x = random_vector(n, 1), dy = random_vector(n, 2);
      std::vector<float> y(n), dx(n);
      std::vector<uint8_t> mask(n);
      dropout(n, p, 42, 1000, x.data(), y.data(), mask.data());
      dropout_backward(n, p, mask.data(), dy.data(), dx.data());
      for (int64_t i = 0; i < n; ++i) {
        const bool keep = counter_uniform(42, 1000 + i) >= p;
        ASSERT_EQ(mask[i], keep ? 1 : 0) << "i=" << i;
        EXPECT_FLOAT_EQ(y[i], keep ? x[i] / (1.0f - p) : 0.0f) << "i=" << i;
        EXPECT_FLOAT_EQ(dx[i], keep ? dy[i] / (1.0f - p) : 0.0f) << "i=" << i;
      }
    }
  }
}

TEST(Dropout, DropsAboutAFractionPAndPreservesTheMean) {
  const int64_t n = 200000;
  for (float p : {0.1f, 0.5f, 0.9f}) {
    std::vector<float> x(n, 1.0f), y(n);
    std::vector<uint8_t> mask(n);
    dropout(n, p, 7, 0, x.data(), y.data(), mask.data());
    double dropped = 0, mean = 0;
    for (int64_t i = 0; i < n; ++i) dropped += mask[i] == 0, mean += y[i];
    dropped /= n;
    mean /= n;
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(dropped, p, 5 * sigma) << "p=" << p;
    EXPECT_NEAR(mean, 1.0, 5 * sigma / (1 - p)) << "p=" << p;
  }
}

TEST(Dropout, ShardWithGlobalOffsetReproducesUnsplitMask) {
  const int64_t n = 1001, split = 377;
  auto x = random_vector(n, 3);
  std::vector<float> y(n), y_a(split), y_b(n - split);
  std::vector<uint8_t> m(n), m_a(split), m_b(n - split);
  dropout(n, 0.5f, 9, 0, x.data(), y.data(), m.data());
  dropout(split, 0.5f, 9, 0, x.data(), y_a.data(), m_a.data());
  dropout(n - split, 0.5f, 9, split, x.data() + split, y_b.data(), m_b.data());
  m_a.insert(m_a.end(), m_b.begin(), m_b.end());
  EXPECT_EQ(m, m_a);
  // Different seeds give different masks.
  std::vector<uint8_t> other(n);
  dropout(n, 0.5f, 10, 0, x.data(), y.data(), other.data());
  EXPECT_NE(m, other);
}

TEST(Dropout, ZeroProbabilityIsIdentityAndOneDropsEverything) {
  auto x = random_vector(33, 4);
  std::vector<float> y(33);
  std::vector<uint8_t> mask(33);
  dropout(33, 0.0f, 1, 0, x.data(), y.data(), mask.data());
  EXPECT_EQ(y, x);
  dropout(33, 1.0f, 1, 0, x.data(), y.data(), mask.data());
  EXPECT_EQ(y, std::vector<float>(33, 0.0f));
}

}  // namespace
}  // namespace px::kernels
