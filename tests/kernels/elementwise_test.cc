#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::all_close;
using testing::directional_derivative_matches;
using testing::random_vector;

// Sizes from tiny through several parallel chunks, mostly prime.
const std::vector<int64_t> kSizes = {1, 3, 7, 13, 17, 31, 64, 1031, 100003};

TEST(Elementwise, PointwiseOpsComputeTheirFormulas) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (int64_t n : kSizes) {
      auto a = random_vector(n, 1), b = random_vector(n, 2);
      std::vector<float> out(static_cast<size_t>(n)), acc = b;
      std::vector<float> sum(static_cast<size_t>(n)), prod(sum), scaled(sum), relu_out(sum),
          relu_grad(sum);
      for (int64_t i = 0; i < n; ++i) {
        sum[i] = a[i] + b[i];
        prod[i] = a[i] * b[i];
        scaled[i] = -2.5f * a[i];
        relu_out[i] = a[i] > 0 ? a[i] : 0.0f;
        relu_grad[i] = a[i] > 0 ? b[i] : 0.0f;
      }
      add(n, a.data(), b.data(), out.data());
      EXPECT_EQ(out, sum) << "add n=" << n;
      add_inplace(n, a.data(), acc.data());
      EXPECT_EQ(acc, sum) << "add_inplace n=" << n;
      mul(n, a.data(), b.data(), out.data());
      EXPECT_EQ(out, prod) << "mul n=" << n;
      scale(n, -2.5f, a.data(), out.data());
      EXPECT_EQ(out, scaled) << "scale n=" << n;
      relu(n, a.data(), out.data());
      EXPECT_EQ(out, relu_out) << "relu n=" << n;
      relu_backward(n, out.data(), b.data(), out.data());
      EXPECT_EQ(out, relu_grad) << "relu_backward n=" << n;
    }
  }
}

TEST(Elementwise, BiasKernelsMatchReferenceOnOddShapes) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {31, 17}, {1031, 13},
                              {997, 384}, {64, 1031}}) {
      auto x = random_vector(rows * cols, 3), bias = random_vector(cols, 4);
      std::vector<float> y(x.size()), expected(x.size());
      add_bias(rows, cols, x.data(), bias.data(), y.data());
      ref::add_bias(rows, cols, x.data(), bias.data(), expected.data());
      EXPECT_EQ(y, expected);
      add_bias(rows, cols, x.data(), bias.data(), x.data());  // in place
      EXPECT_EQ(x, expected);
      auto db = random_vector(cols, 5), db_ref = db;
      bias_grad(rows, cols, x.data(), db.data());
      ref::bias_grad(rows, cols, x.data(), db_ref.data());
      EXPECT_TRUE(all_close(db, db_ref, 1e-5f, 1e-4f)) << rows << "x" << cols;
    }
  }
}

TEST(Elementwise, GeluMatchesReferenceIncludingTails) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (int64_t n : kSizes) {
      auto x = random_vector(n, 6, -12.0f, 12.0f), dy = random_vector(n, 7);
      std::vector<float> y(x.size()), y_ref(x.size()), dx(x.size()), dx_ref(x.size());
      gelu(n, x.data(), y.data());
      ref::gelu(n, x.data(), y_ref.data());
      EXPECT_TRUE(all_close(y, y_ref, 1e-5f, 1e-6f)) << "n=" << n;
      gelu_backward(n, x.data(), dy.data(), dx.data());
      ref::gelu_backward(n, x.data(), dy.data(), dx_ref.data());
      EXPECT_TRUE(all_close(dx, dx_ref, 1e-5f, 1e-6f)) << "n=" << n;
    }
  }
}

// bf16 storage: x read from bf16 gives exactly the fp32 kernels' results on
// the widened values, and a bf16 y holds exactly their rounding (to_bf16's,
// which the reference conversion defines bit for bit).
TEST(Elementwise, Bf16StoredGeluAndBiasMatchTheFp32KernelsOnWidenedValues) {
  testing::ThreadReset reset;
  auto narrow = [](const std::vector<float>& v) {
    std::vector<bf16> out(v.size());
    ref::to_bf16(static_cast<int64_t>(v.size()), v.data(), out.data());
    return out;
  };
  auto widen = [](const std::vector<bf16>& v) {
    std::vector<float> out(v.size());
    ref::to_float(static_cast<int64_t>(v.size()), v.data(), out.data());
    return out;
  };
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (int64_t n : kSizes) {
      const std::vector<bf16> x = narrow(random_vector(n, 14, -12.0f, 12.0f));
      const std::vector<float> wide = widen(x), dy = random_vector(n, 15);
      std::vector<float> y(wide.size()), y_wide(wide.size()), dx(wide.size()), dx_wide(wide.size());
      gelu(n, x.data(), y.data());
      gelu(n, wide.data(), y_wide.data());
      EXPECT_EQ(y, y_wide) << "gelu n=" << n;
      std::vector<bf16> y_stored(x.size());
      gelu(n, x.data(), y_stored.data());
      EXPECT_EQ(y_stored, narrow(y_wide)) << "gelu to bf16 n=" << n;
      std::vector<float> y_ref(wide.size());
      ref::gelu(n, wide.data(), y_ref.data());
      EXPECT_TRUE(all_close(widen(y_stored), y_ref, 1.0f / 256, 1e-6f)) << "within a bf16 rounding, n=" << n;
      gelu_backward(n, x.data(), dy.data(), dx.data());
      gelu_backward(n, wide.data(), dy.data(), dx_wide.data());
      EXPECT_EQ(dx, dx_wide) << "gelu_backward n=" << n;
    }
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {31, 17}, {997, 384}, {5, 4099}}) {
      auto x = random_vector(rows * cols, 16), bias = random_vector(cols, 17);
      std::vector<float> expected(x.size());
      ref::add_bias(rows, cols, x.data(), bias.data(), expected.data());
      std::vector<bf16> y(x.size());
      add_bias(rows, cols, x.data(), bias.data(), y.data());
      EXPECT_EQ(y, narrow(expected)) << rows << "x" << cols;
    }
  }
}

// The fused GELU gradient and bias gradient: bit for bit the unfused
// kernels (gelu_backward, bias_grad into zeros, to_bf16), for x and dx in
// either storage and at 1 and 2 threads (the sums walk the rows in order
// whatever the split); and near the reference: dx as gelu_backward's
// tolerance, each column sum within it plus rows fp32 additions' rounding,
// relative to the sum of |dx|.
TEST(Elementwise, GeluBackwardWithBiasSumsIsTheUnfusedKernelsAndNearTheReference) {
  testing::ThreadReset reset;
  auto narrow = [](const std::vector<float>& v) {
    std::vector<bf16> out(v.size());
    ref::to_bf16(static_cast<int64_t>(v.size()), v.data(), out.data());
    return out;
  };
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {31, 17}, {997, 384}, {5, 4099}}) {
      const int64_t n = rows * cols;
      const std::vector<float> x = random_vector(n, 18, -6.0f, 6.0f), dy = random_vector(n, 19);
      const std::vector<bf16> x_bf16 = narrow(x);
      std::vector<float> wide(x.size());
      ref::to_float(n, x_bf16.data(), wide.data());
      for (bool stored : {false, true}) {
        const std::vector<float>& x_read = stored ? wide : x;
        std::vector<float> unfused(x.size()), sums(static_cast<size_t>(cols), 0.0f);
        gelu_backward(n, x_read.data(), dy.data(), unfused.data());
        bias_grad(rows, cols, unfused.data(), sums.data());
        std::vector<float> dx(x.size(), 5.0f), dbias(static_cast<size_t>(cols), 5.0f);
        const std::string where = std::to_string(rows) + "x" + std::to_string(cols) + " threads " +
                                  std::to_string(threads) + (stored ? " x in bf16" : " x fp32");
        if (stored) {
          gelu_backward_bias(rows, cols, x_bf16.data(), dy.data(), dx.data(), dbias.data());
          EXPECT_EQ(dx, unfused) << where;
          EXPECT_EQ(dbias, sums) << where;
          std::vector<bf16> dx_bf16(x.size());
          std::fill(dbias.begin(), dbias.end(), 5.0f);
          gelu_backward_bias(rows, cols, x_bf16.data(), dy.data(), dx_bf16.data(), dbias.data());
          EXPECT_EQ(dx_bf16, narrow(unfused)) << where << ", dx in bf16";
          EXPECT_EQ(dbias, sums) << where << ", dx in bf16";
        } else {
          gelu_backward_bias(rows, cols, x.data(), dy.data(), dx.data(), dbias.data());
          EXPECT_EQ(dx, unfused) << where;
          EXPECT_EQ(dbias, sums) << where;
        }
        std::vector<float> dx_ref(x.size()), dbias_ref(static_cast<size_t>(cols));
        ref::gelu_backward_bias(rows, cols, x_read.data(), dy.data(), dx_ref.data(), dbias_ref.data());
        EXPECT_TRUE(all_close(unfused, dx_ref, 1e-5f, 1e-6f)) << where;
        for (int64_t c = 0; c < cols; ++c) {
          double magnitude = 0.0;
          for (int64_t r = 0; r < rows; ++r) magnitude += std::fabs(dx_ref[static_cast<size_t>(r * cols + c)]);
          const double bound = (1e-5 + double(rows) * std::ldexp(1.0, -24)) * magnitude + 1e-6 * double(rows);
          EXPECT_LE(std::fabs(double(sums[static_cast<size_t>(c)]) - dbias_ref[static_cast<size_t>(c)]), bound)
              << where << " column " << c;
        }
      }
    }
  }
}

TEST(Elementwise, ReferenceGeluIsTheTanhApproximation) {
  const std::vector<float> x = {-3.0f, -0.5f, 0.0f, 0.5f, 1.0f, 3.0f};
  std::vector<float> y(x.size());
  ref::gelu(static_cast<int64_t>(x.size()), x.data(), y.data());
  // Values of torch.nn.functional.gelu(x, approximate='tanh').
  const std::vector<float> expected = {-0.00363739f, -0.15428599f, 0.0f,
                                       0.34571401f,  0.84119199f,  2.99636261f};
  EXPECT_TRUE(all_close(y, expected, 1e-5f, 1e-6f));
}

TEST(Elementwise, GeluBackwardMatchesFiniteDifferences) {
  const int64_t n = 257;
  auto x = random_vector(n, 8, -4.0f, 4.0f), r = random_vector(n, 9);
  auto loss = [&](const std::vector<float>& in) {
    std::vector<float> y(in.size());
    ref::gelu(n, in.data(), y.data());
    return testing::dot(r, y);
  };
  std::vector<float> dx(x.size());
  gelu_backward(n, x.data(), r.data(), dx.data());
  EXPECT_TRUE(directional_derivative_matches(loss, x, dx, 10));
  ref::gelu_backward(n, x.data(), r.data(), dx.data());
  EXPECT_TRUE(directional_derivative_matches(loss, x, dx, 11));
}

TEST(Elementwise, ReluBackwardMatchesFiniteDifferences) {
  const int64_t n = 101;
  auto x = random_vector(n, 12), r = random_vector(n, 13);
  auto loss = [&](const std::vector<float>& in) {
    std::vector<float> y(in.size());
    relu(n, in.data(), y.data());
    return testing::dot(r, y);
  };
  std::vector<float> y(x.size()), dx(x.size());
  relu(n, x.data(), y.data());
  relu_backward(n, y.data(), r.data(), dx.data());
  EXPECT_TRUE(directional_derivative_matches(loss, x, dx, 14, 1e-4));
}

TEST(Elementwise, SumSquaresMatchesReferenceAndIgnoresThreadCount) {
  testing::ThreadReset reset;
  for (int64_t n : kSizes) {
    auto x = random_vector(n, 15);
    set_threads(1);
    const float one = sum_squares(n, x.data());
    set_threads(2);
    const float two = sum_squares(n, x.data());
    EXPECT_EQ(one, two) << "n=" << n;
    const float expected = ref::sum_squares(n, x.data());
    EXPECT_NEAR(one, expected, 1e-6 * expected) << "n=" << n;
  }
  EXPECT_EQ(sum_squares(0, nullptr), 0.0f);
}

}  // namespace
}  // namespace px::kernels
