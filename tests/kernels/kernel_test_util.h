// Helpers shared by the kernel tests: random data, tolerant comparison, and a
// directional finite-difference check for backward kernels.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/threads.h"

namespace px::kernels::testing {

inline const std::vector<int> kThreadCounts = {1, 2};

// Restores the single-threaded default when a test ends, even on failure.
struct ThreadReset {
  ~ThreadReset() { set_threads(1); }
};

inline std::vector<float> random_vector(int64_t n, uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * static_cast<float>(rng.uniform());
  return v;
}

inline std::vector<int32_t> random_ids(int64_t n, int32_t below, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(below)));
  return v;
}

// Passes when |actual - expected| <= atol + rtol * |expected| everywhere.
inline ::testing::AssertionResult all_close(const std::vector<float>& actual,
                                            const std::vector<float>& expected, float rtol,
                                            float atol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " vs " << expected.size();
  for (size_t i = 0; i < actual.size(); ++i) {
    const float a = actual[i], e = expected[i];
    if (!(std::fabs(a - e) <= atol + rtol * std::fabs(e)))
      return ::testing::AssertionFailure() << "at " << i << ": " << a << " vs expected " << e;
  }
  return ::testing::AssertionSuccess();
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Directional derivative check of a backward kernel. `loss(x)` returns
// <r, f(x)> for a fixed random projection r; `grad` is the backward kernel's
// d loss / dx at x. Compares (loss(x + eps v) - loss(x - eps v)) / 2eps with
// <grad, v> for a random direction v.
inline ::testing::AssertionResult directional_derivative_matches(
    const std::function<double(const std::vector<float>&)>& loss, const std::vector<float>& x,
    const std::vector<float>& grad, uint64_t seed, double eps = 1e-3, double rtol = 1e-2) {
  const std::vector<float> v = random_vector(static_cast<int64_t>(x.size()), seed);
  std::vector<float> plus = x, minus = x;
  for (size_t i = 0; i < x.size(); ++i) {
    plus[i] += static_cast<float>(eps) * v[i];
    minus[i] -= static_cast<float>(eps) * v[i];
  }
  const double numeric = (loss(plus) - loss(minus)) / (2.0 * eps);
  const double analytic = dot(grad, v);
  const double scale = std::max({std::fabs(numeric), std::fabs(analytic), 1e-3});
  if (std::fabs(numeric - analytic) <= rtol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "finite difference " << numeric << " vs backward "
                                       << analytic;
}

}  // namespace px::kernels::testing
