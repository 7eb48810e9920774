#include <gtest/gtest.h>

#include <cmath>

#include "kernels/bf16.h"
#include "kernels/conv.h"
#include "kernels/cpu_features.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::all_close;
using testing::directional_derivative_matches;
using testing::random_vector;

const std::vector<Conv2dShape> kShapes = {
    {.N = 1, .Ci = 1, .H = 1, .W = 1, .Co = 1, .Kh = 1, .Kw = 1, .stride = 1, .pad = 0},
    {.N = 3, .Ci = 2, .H = 7, .W = 5, .Co = 3, .Kh = 3, .Kw = 3, .stride = 1, .pad = 1},
    {.N = 2, .Ci = 3, .H = 13, .W = 17, .Co = 7, .Kh = 5, .Kw = 3, .stride = 2, .pad = 2},
    {.N = 5, .Ci = 4, .H = 11, .W = 11, .Co = 5, .Kh = 1, .Kw = 1, .stride = 1, .pad = 0},
    {.N = 7, .Ci = 1, .H = 28, .W = 28, .Co = 8, .Kh = 5, .Kw = 5, .stride = 1, .pad = 0},
    {.N = 4, .Ci = 3, .H = 31, .W = 29, .Co = 2, .Kh = 4, .Kw = 2, .stride = 3, .pad = 1},
};

TEST(Conv2d, FastMatchesReferenceOnOddShapes) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (const Conv2dShape& s : kShapes) {
      const int64_t nx = s.N * s.Ci * s.H * s.W, nw = s.Co * s.Ci * s.Kh * s.Kw,
                    ny = s.N * s.Co * s.Ho() * s.Wo();
      auto x = random_vector(nx, 1), w = random_vector(nw, 2), bias = random_vector(s.Co, 3);
      auto dy = random_vector(ny, 4);
      const std::string where = "N=" + std::to_string(s.N) + " Ci=" + std::to_string(s.Ci) +
                                " H=" + std::to_string(s.H) + " K=" + std::to_string(s.Kh) +
                                " stride=" + std::to_string(s.stride);
      for (bool with_bias : {true, false}) {
        std::vector<float> y(ny), y_ref(ny);
        const float* b = with_bias ? bias.data() : nullptr;
        conv2d(s, x.data(), w.data(), b, y.data());
        ref::conv2d(s, x.data(), w.data(), b, y_ref.data());
        EXPECT_TRUE(all_close(y, y_ref, 1e-4f, 1e-4f)) << where;
      }
      std::vector<float> dx(nx, NAN), dx_ref(nx);
      auto dw = random_vector(nw, 5), db = random_vector(s.Co, 6);
      auto dw_ref = dw, db_ref = db;
      conv2d_backward(s, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
      ref::conv2d_backward(s, x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(),
                           db_ref.data());
      EXPECT_TRUE(all_close(dx, dx_ref, 1e-4f, 1e-4f)) << where;
      EXPECT_TRUE(all_close(dw, dw_ref, 1e-4f, 1e-3f)) << where;
      EXPECT_TRUE(all_close(db, db_ref, 1e-4f, 1e-3f)) << where;
      // Null dx and dbias are allowed.
      auto dw_only = dw_ref;
      conv2d_backward(s, x.data(), w.data(), dy.data(), nullptr, dw_only.data(), nullptr);
      ref::conv2d_backward(s, x.data(), w.data(), dy.data(), nullptr, dw_ref.data(), nullptr);
      EXPECT_TRUE(all_close(dw_only, dw_ref, 1e-4f, 1e-3f)) << where;
    }
  }
}

std::vector<float> rounded_to_bf16(std::vector<float> v) {
  for (float& x : v) x = to_float(to_bf16(x));
  return v;
}

std::vector<float> magnitudes(std::vector<float> v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}

// |fast - reference| <= gamma(K + 5) S elementwise (gemm_bf16_test.cc's
// bound: products of bf16 values are exact in fp32, only the sums round,
// in any order), S the reference run on the inputs' magnitudes.
::testing::AssertionResult within_bound(const std::vector<float>& fast, const std::vector<float>& reference,
                                        const std::vector<float>& sums, int64_t K, const std::string& what) {
  const double u = std::ldexp(1.0, -24), n = double(K + 5), gamma = n * u / (1.0 - n * u);
  for (size_t i = 0; i < fast.size(); ++i)
    if (!(std::fabs(double(fast[i]) - reference[i]) <= 1.01 * gamma * sums[i]))
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << fast[i] << ", reference " << reference[i]
                                           << ", bound " << gamma * sums[i];
  return ::testing::AssertionSuccess();
}

// The bf16 convolution against the fp32 reference on the bf16-rounded x,
// w and dy. K per output: Ci Kh Kw (y, plus the bias), Co Kh Kw (dx, GEMM
// then col2im), N Ho Wo (dw). The bias gradient sums dy in fp32 in both.
TEST(Conv2d, MixedBf16MatchesTheReferenceOfRoundedInputsWithinTheBoundForK) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16: the bf16 convolution refuses to run";
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (const Conv2dShape& s : kShapes) {
      const int64_t nx = s.N * s.Ci * s.H * s.W, nw = s.Co * s.Ci * s.Kh * s.Kw,
                    ny = s.N * s.Co * s.Ho() * s.Wo();
      const std::vector<float> x = random_vector(nx, 11), w = random_vector(nw, 12), bias = random_vector(s.Co, 13),
                               dy = random_vector(ny, 14);
      const std::vector<float> xr = rounded_to_bf16(x), wr = rounded_to_bf16(w), dyr = rounded_to_bf16(dy);
      const std::string where = "threads=" + std::to_string(threads) + " N=" + std::to_string(s.N) +
                                " Ci=" + std::to_string(s.Ci) + " K=" + std::to_string(s.Kh) + " stride=" +
                                std::to_string(s.stride) + ": ";
      std::vector<float> y(ny), y_ref(ny), y_sums(ny);
      conv2d_mixed_bf16(s, x.data(), w.data(), bias.data(), y.data());
      ref::conv2d(s, xr.data(), wr.data(), bias.data(), y_ref.data());
      ref::conv2d(s, magnitudes(xr).data(), magnitudes(wr).data(), magnitudes(bias).data(), y_sums.data());
      EXPECT_TRUE(within_bound(y, y_ref, y_sums, s.Ci * s.Kh * s.Kw + 1, where + "y"));

      std::vector<float> dx(nx, NAN), dx_ref(nx), dx_sums(nx), dw(nw, 0.0f), dw_ref(nw, 0.0f), dw_sums(nw, 0.0f);
      std::vector<float> db(s.Co, 0.0f), db_ref(s.Co, 0.0f), db_sums(s.Co, 0.0f);
      conv2d_backward_mixed_bf16(s, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
      ref::conv2d_backward(s, xr.data(), wr.data(), dyr.data(), dx_ref.data(), dw_ref.data(), nullptr);
      ref::conv2d_backward(s, magnitudes(xr).data(), magnitudes(wr).data(), magnitudes(dyr).data(), dx_sums.data(),
                           dw_sums.data(), nullptr);
      EXPECT_TRUE(within_bound(dx, dx_ref, dx_sums, s.Co * s.Kh * s.Kw, where + "dx"));
      EXPECT_TRUE(within_bound(dw, dw_ref, dw_sums, s.N * s.Ho() * s.Wo(), where + "dw"));
      ref::conv2d_backward(s, x.data(), w.data(), dy.data(), nullptr, std::vector<float>(nw).data(), db_ref.data());
      EXPECT_TRUE(all_close(db, db_ref, 1e-5f, 1e-5f)) << where << "db";
    }
  }
}

TEST(Conv2d, ReferenceComputesKnownCrossCorrelation) {
  // 3x3 input, 2x2 kernel, no padding: y[i,j] = sum x[i+a, j+b] w[a, b].
  const Conv2dShape s{.N = 1, .Ci = 1, .H = 3, .W = 3, .Co = 1, .Kh = 2, .Kw = 2, .stride = 1,
                      .pad = 0};
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w = {1, 0, 0, -1}, bias = {10};
  std::vector<float> y(4);
  ref::conv2d(s, x.data(), w.data(), bias.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{6, 6, 6, 6}));
}

TEST(Conv2d, BackwardMatchesFiniteDifferencesForEveryInput) {
  const Conv2dShape s{.N = 2, .Ci = 2, .H = 6, .W = 7, .Co = 3, .Kh = 3, .Kw = 2, .stride = 2,
                      .pad = 1};
  const int64_t nx = s.N * s.Ci * s.H * s.W, nw = s.Co * s.Ci * s.Kh * s.Kw,
                ny = s.N * s.Co * s.Ho() * s.Wo();
  auto x = random_vector(nx, 7), w = random_vector(nw, 8), bias = random_vector(s.Co, 9);
  auto r = random_vector(ny, 10);
  auto loss = [&](const std::vector<float>& xx, const std::vector<float>& ww,
                  const std::vector<float>& bb) {
    std::vector<float> y(ny);
    ref::conv2d(s, xx.data(), ww.data(), bb.data(), y.data());
    return testing::dot(r, y);
  };
  for (bool fast : {true, false}) {
    std::vector<float> dx(nx), dw(nw, 0.0f), db(s.Co, 0.0f);
    (fast ? conv2d_backward : ref::conv2d_backward)(s, x.data(), w.data(), r.data(), dx.data(),
                                                    dw.data(), db.data());
    EXPECT_TRUE(directional_derivative_matches(
        [&](const std::vector<float>& v) { return loss(v, w, bias); }, x, dx, 11));
    EXPECT_TRUE(directional_derivative_matches(
        [&](const std::vector<float>& v) { return loss(x, v, bias); }, w, dw, 12));
    EXPECT_TRUE(directional_derivative_matches(
        [&](const std::vector<float>& v) { return loss(x, w, v); }, bias, db, 13));
  }
}

}  // namespace
}  // namespace px::kernels
