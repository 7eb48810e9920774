#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"

namespace px {

TEST(Rng, SameSeedSameStreamAndStateRestores) {
  Rng a(42), b(42);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  auto saved = a.state();
  double x = a.uniform();
  a.set_state(saved);
  EXPECT_EQ(a.uniform(), x);
}

TEST(Rng, NormalHasUnitMomentsApproximately) {
  Rng r(1);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double v = r.normal();
    sum += v;
    sq += v * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.02);
}

TEST(Rng, CounterUniformIsInUnitIntervalAndSeedDependent) {
  int differ = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    float u = counter_uniform(7, i);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
    differ += counter_uniform(8, i) != u;
  }
  EXPECT_GT(differ, 990);
}

}  // namespace px
