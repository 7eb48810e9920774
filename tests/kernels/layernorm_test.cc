#include <gtest/gtest.h>

#include "kernels/layernorm.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::all_close;
using testing::directional_derivative_matches;
using testing::random_vector;

const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1},   {3, 7},    {13, 17},
                                                          {31, 64}, {1031, 13}, {517, 384}};

TEST(LayerNorm, FastMatchesReferenceOnPrimeSizes) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (auto [rows, C] : kShapes) {
      auto x = random_vector(rows * C, 1, -3.0f, 2.0f), g = random_vector(C, 2);
      auto b = random_vector(C, 3), dy = random_vector(rows * C, 4);
      std::vector<float> y(x.size()), y_ref(x.size()), mean(rows), rstd(rows), mean_ref(rows),
          rstd_ref(rows);
      layernorm(rows, C, 1e-5f, x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data());
      ref::layernorm(rows, C, 1e-5f, x.data(), g.data(), b.data(), y_ref.data(), mean_ref.data(),
                     rstd_ref.data());
      EXPECT_TRUE(all_close(y, y_ref, 1e-4f, 1e-4f)) << rows << "x" << C;
      EXPECT_TRUE(all_close(mean, mean_ref, 1e-5f, 1e-5f));
      EXPECT_TRUE(all_close(rstd, rstd_ref, 1e-4f, 1e-5f));

      std::vector<float> dx(x.size()), dx_ref(x.size());
      auto dg = random_vector(C, 5), db = random_vector(C, 6);
      auto dg_ref = dg, db_ref = db;
      layernorm_backward(rows, C, x.data(), g.data(), mean_ref.data(), rstd_ref.data(), dy.data(),
                         dx.data(), dg.data(), db.data());
      ref::layernorm_backward(rows, C, x.data(), g.data(), mean_ref.data(), rstd_ref.data(),
                              dy.data(), dx_ref.data(), dg_ref.data(), db_ref.data());
      EXPECT_TRUE(all_close(dx, dx_ref, 1e-3f, 1e-4f)) << rows << "x" << C;
      EXPECT_TRUE(all_close(dg, dg_ref, 1e-4f, 1e-3f)) << rows << "x" << C;
      EXPECT_TRUE(all_close(db, db_ref, 1e-4f, 1e-3f)) << rows << "x" << C;
    }
  }
}

TEST(LayerNorm, NormalizesEachRowToZeroMeanUnitVariance) {
  const int64_t rows = 5, C = 31;
  auto x = random_vector(rows * C, 7, 3.0f, 9.0f);
  std::vector<float> g(C, 1.0f), b(C, 0.0f), y(x.size()), mean(rows), rstd(rows);
  ref::layernorm(rows, C, 0.0f, x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data());
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0, ss = 0;
    for (int64_t c = 0; c < C; ++c) s += y[r * C + c], ss += y[r * C + c] * y[r * C + c];
    EXPECT_NEAR(s / C, 0.0, 1e-5);
    EXPECT_NEAR(ss / C, 1.0, 1e-4);
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesForEveryInput) {
  for (bool fast : {true, false}) {
    const int64_t rows = 7, C = 13;
    auto x = random_vector(rows * C, 8, -2.0f, 2.0f), g = random_vector(C, 9);
    auto b = random_vector(C, 10), r = random_vector(rows * C, 11);
    auto loss = [&](const std::vector<float>& xx, const std::vector<float>& gg,
                    const std::vector<float>& bb) {
      std::vector<float> y(xx.size()), mean(rows), rstd(rows);
      ref::layernorm(rows, C, 1e-5f, xx.data(), gg.data(), bb.data(), y.data(), mean.data(),
                     rstd.data());
      return testing::dot(r, y);
    };
    std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dg(C, 0.0f),
        db(C, 0.0f);
    ref::layernorm(rows, C, 1e-5f, x.data(), g.data(), b.data(), y.data(), mean.data(),
                   rstd.data());
    (fast ? layernorm_backward : ref::layernorm_backward)(rows, C, x.data(), g.data(),
                                                          mean.data(), rstd.data(), r.data(),
                                                          dx.data(), dg.data(), db.data());
    EXPECT_TRUE(directional_derivative_matches(
        [&](const std::vector<float>& v) { return loss(v, g, b); }, x, dx, 12))
        << "dx fast=" << fast;
    EXPECT_TRUE(directional_derivative_matches(
        [&](const std::vector<float>& v) { return loss(x, v, b); }, g, dg, 13))
        << "dgamma fast=" << fast;
    EXPECT_TRUE(directional_derivative_matches(
        [&](const std::vector<float>& v) { return loss(x, g, v); }, b, db, 14))
        << "dbeta fast=" << fast;
  }
}

}  // namespace
}  // namespace px::kernels
