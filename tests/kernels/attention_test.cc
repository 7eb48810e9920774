#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/cpu_features.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::all_close;
using testing::directional_derivative_matches;
using testing::random_vector;

struct Dims {
  int64_t B, T, H, D;
};

TEST(Attention, FastMatchesReferenceOnPrimeSizes) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (Dims d : {Dims{1, 1, 1, 1}, Dims{2, 3, 1, 7}, Dims{1, 13, 3, 5}, Dims{3, 17, 2, 8},
                   Dims{2, 31, 3, 13}, Dims{2, 67, 2, 16}, Dims{1, 131, 3, 32}}) {
      const int64_t C = d.H * d.D;
      auto qkv = random_vector(d.B * d.T * 3 * C, 1, -2.0f, 2.0f);
      auto dout = random_vector(d.B * d.T * C, 2);
      std::vector<float> out(d.B * d.T * C), out_ref(out.size());
      std::vector<float> probs(d.B * d.H * d.T * d.T, NAN), probs_ref(probs.size());
      attention(d.B, d.T, d.H, d.D, qkv.data(), out.data(), probs.data());
      ref::attention(d.B, d.T, d.H, d.D, qkv.data(), out_ref.data(), probs_ref.data());
      const std::string where = "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) +
                                " H=" + std::to_string(d.H) + " D=" + std::to_string(d.D);
      EXPECT_TRUE(all_close(probs, probs_ref, 1e-4f, 1e-6f)) << where;
      EXPECT_TRUE(all_close(out, out_ref, 1e-4f, 1e-5f)) << where;

      std::vector<float> dqkv(qkv.size(), NAN), dqkv_ref(qkv.size());
      attention_backward(d.B, d.T, d.H, d.D, qkv.data(), probs_ref.data(), dout.data(),
                         dqkv.data());
      ref::attention_backward(d.B, d.T, d.H, d.D, qkv.data(), probs_ref.data(), dout.data(),
                              dqkv_ref.data());
      EXPECT_TRUE(all_close(dqkv, dqkv_ref, 1e-3f, 1e-4f)) << where;
    }
  }
}

// ||x - y|| / ||y||.
double relative_error(const std::vector<float>& x, const std::vector<float>& y) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    norm += double(y[i]) * y[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

std::vector<bf16> rounded(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  to_bf16(static_cast<int64_t>(x.size()), x.data(), out.data());
  return out;
}

std::vector<float> widened(const std::vector<bf16>& x) {
  std::vector<float> out(x.size());
  to_float(static_cast<int64_t>(x.size()), x.data(), out.data());
  return out;
}

// The bf16 path against the fp32 reference run on the same bf16-rounded q,
// k, v: the scores are then exact products summed in fp32, so probs agree
// to fp32 rounding; out rounds P once (2^-8 relative per product) and the
// gradients round dO, dS and P on their way into three chained products,
// each adding at most ~2^-7 relative: 1e-2 and 3e-2 in norm leave room for
// cancellation. And the same results, bit for bit, whether qkv and probs
// arrive in fp32 or already stored in bf16 (what the lowering does).
TEST(Attention, Bf16PathMatchesFp32OnRoundedInputsAndStorageChangesNothing) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16: the bf16 path refuses to run";
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (Dims d : {Dims{1, 1, 1, 1}, Dims{2, 3, 1, 7}, Dims{1, 13, 3, 5}, Dims{2, 67, 2, 16}, Dims{1, 131, 3, 32},
                   Dims{2, 67, 2, 64}, Dims{1, 131, 1, 80}}) {
      const int64_t C = d.H * d.D;
      const std::string where = "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) + " H=" +
                                std::to_string(d.H) + " D=" + std::to_string(d.D) + " threads=" + std::to_string(threads);
      const std::vector<bf16> qkv16 = rounded(random_vector(d.B * d.T * 3 * C, 1, -2.0f, 2.0f));
      const std::vector<float> qkv = widened(qkv16), dout = random_vector(d.B * d.T * C, 2);
      std::vector<float> out(d.B * d.T * C), out_ref(out.size()), out_stored(out.size());
      std::vector<float> probs(d.B * d.H * d.T * d.T, NAN), probs_ref(probs.size()), probs_stored(probs.size());
      attention_bf16(d.B, d.T, d.H, d.D, {.f32 = qkv.data()}, out.data(), probs.data());
      attention_bf16(d.B, d.T, d.H, d.D, {.rounded = qkv16.data()}, out_stored.data(), probs_stored.data());
      ref::attention(d.B, d.T, d.H, d.D, qkv.data(), out_ref.data(), probs_ref.data());
      EXPECT_TRUE(all_close(probs, probs_ref, 1e-4f, 1e-6f)) << where;
      EXPECT_LE(relative_error(out, out_ref), 1e-2) << where;
      EXPECT_EQ(out, out_stored) << where;
      EXPECT_EQ(probs, probs_stored) << where;

      const std::vector<bf16> probs16 = rounded(probs);
      std::vector<float> dqkv(qkv.size(), NAN), dqkv_ref(qkv.size()), dqkv_stored(qkv.size(), NAN);
      attention_backward_bf16(d.B, d.T, d.H, d.D, {.f32 = qkv.data()}, {.f32 = probs.data()}, dout.data(),
                              dqkv.data());
      attention_backward_bf16(d.B, d.T, d.H, d.D, {.rounded = qkv16.data()}, {.rounded = probs16.data()},
                              dout.data(), dqkv_stored.data());
      ref::attention_backward(d.B, d.T, d.H, d.D, qkv.data(), probs_ref.data(), dout.data(), dqkv_ref.data());
      EXPECT_LE(relative_error(dqkv, dqkv_ref), 3e-2) << where;
      EXPECT_EQ(dqkv, dqkv_stored) << where;
    }
  }
}

TEST(Attention, ProbsAreCausalAndRowsSumToOne) {
  const Dims d{2, 19, 3, 4};
  auto qkv = random_vector(d.B * d.T * 3 * d.H * d.D, 3);
  std::vector<float> out(d.B * d.T * d.H * d.D), probs(d.B * d.H * d.T * d.T, NAN);
  attention(d.B, d.T, d.H, d.D, qkv.data(), out.data(), probs.data());
  for (int64_t bh = 0; bh < d.B * d.H; ++bh)
    for (int64_t t = 0; t < d.T; ++t) {
      double total = 0;
      for (int64_t j = 0; j < d.T; ++j) {
        const float p = probs[(bh * d.T + t) * d.T + j];
        if (j > t) {
          EXPECT_EQ(p, 0.0f) << "t=" << t << " j=" << j;
        }
        total += p;
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
}

TEST(Attention, FirstPositionOutputsItsOwnValue) {
  // Query 0 sees only key 0, so out[b, 0, h] = v[b, 0, h].
  const Dims d{2, 5, 2, 3};
  const int64_t C = d.H * d.D;
  auto qkv = random_vector(d.B * d.T * 3 * C, 4);
  std::vector<float> out(d.B * d.T * C), probs(d.B * d.H * d.T * d.T);
  attention(d.B, d.T, d.H, d.D, qkv.data(), out.data(), probs.data());
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_FLOAT_EQ(out[b * d.T * C + c], qkv[b * d.T * 3 * C + 2 * C + c]);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  for (bool fast : {true, false}) {
    const Dims d{2, 7, 2, 5};
    const int64_t C = d.H * d.D;
    auto qkv = random_vector(d.B * d.T * 3 * C, 5), r = random_vector(d.B * d.T * C, 6);
    auto loss = [&](const std::vector<float>& in) {
      std::vector<float> out(r.size()), probs(d.B * d.H * d.T * d.T);
      ref::attention(d.B, d.T, d.H, d.D, in.data(), out.data(), probs.data());
      return testing::dot(r, out);
    };
    std::vector<float> out(r.size()), probs(d.B * d.H * d.T * d.T), dqkv(qkv.size());
    ref::attention(d.B, d.T, d.H, d.D, qkv.data(), out.data(), probs.data());
    (fast ? attention_backward : ref::attention_backward)(d.B, d.T, d.H, d.D, qkv.data(),
                                                          probs.data(), r.data(), dqkv.data());
    for (uint64_t seed : {7, 8, 9})
      EXPECT_TRUE(directional_derivative_matches(loss, qkv, dqkv, seed)) << "fast=" << fast;
  }
}

}  // namespace
}  // namespace px::kernels
