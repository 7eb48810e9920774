// The tiled attention kernels (kernels/attention.h) against the textbook
// reference in double, at sizes no tile divides, causal and not; the bf16
// path against the fp32 one on rounded inputs; finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::directional_derivative_matches;
using testing::random_vector;

std::string where(const AttentionDims& a) {
  return "B=" + std::to_string(a.B) + " T=" + std::to_string(a.T) + " H=" + std::to_string(a.H) +
         " D=" + std::to_string(a.D) + (a.causal ? " causal" : " full");
}

int64_t qkv_size(const AttentionDims& a) { return a.B * a.T * 3 * a.H * a.D; }
int64_t out_size(const AttentionDims& a) { return a.B * a.T * a.H * a.D; }
int64_t lse_size(const AttentionDims& a) { return a.B * a.H * a.T; }

// ||x - y|| / ||y||.
double relative_error(const std::vector<float>& x, const std::vector<float>& y) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    norm += double(y[i]) * y[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

// Odd sizes against the tiles (64 query rows, 128 keys): one row, less
// than a tile, a tile and one, many tiles with a ragged last one.
std::vector<AttentionDims> odd_sizes() {
  std::vector<AttentionDims> out;
  for (bool causal : {true, false}) {
    for (AttentionDims a : {AttentionDims{1, 1, 1, 8}, AttentionDims{2, 7, 3, 8}, AttentionDims{2, 33, 2, 64},
                            AttentionDims{1, 129, 2, 80}, AttentionDims{1, 129, 1, 64}, AttentionDims{1, 1000, 1, 8}}) {
      a.causal = causal;
      out.push_back(a);
    }
  }
  out.push_back({.B = 1, .T = 1000, .H = 1, .D = 64, .causal = true});
  return out;
}

TEST(Attention, TiledMatchesReferenceOnOddSizesCausalAndNot) {
  testing::ThreadReset reset;
  for (const AttentionDims& a : odd_sizes()) {
    const auto qkv = random_vector(qkv_size(a), 1, -2.0f, 2.0f), dout = random_vector(out_size(a), 2);
    std::vector<float> out_ref(out_size(a)), lse_ref(lse_size(a)), dqkv_ref(qkv.size());
    ref::attention(a, qkv.data(), out_ref.data(), lse_ref.data());
    ref::attention_backward(a, qkv.data(), dout.data(), dqkv_ref.data());
    for (int threads : testing::kThreadCounts) {
      set_threads(threads);
      std::vector<float> out(out_ref.size(), NAN), lse(lse_ref.size(), NAN), dqkv(qkv.size(), NAN);
      attention(a, qkv.data(), out.data(), lse.data());
      attention_backward(a, qkv.data(), out.data(), lse.data(), dout.data(), dqkv.data());
      const std::string at = where(a) + " threads=" + std::to_string(threads);
      EXPECT_LE(relative_error(out, out_ref), 1e-5) << at;
      EXPECT_LE(relative_error(lse, lse_ref), 1e-5) << at;
      EXPECT_LE(relative_error(dqkv, dqkv_ref), 1e-5) << at;
    }
  }
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

// bf16 operands with fp32 accumulation: exactly the fp32 kernel on the
// rounded q, k, v (and, in backward, the rounded output, which softmax's
// row term <dout, out> reads, as FlashAttention-2's does), whether they
// arrive in fp32 (rounded as read) or already stored in bf16 (what the
// lowering does). Against the reference on the rounded q, k, v: forward
// within fp32's bound; the gradient within bf16's (the output's rounding,
// 2^-9 relative, enters every dS through the row term).
TEST(Attention, Bf16IsTheFp32KernelOnRoundedOperands) {
  testing::ThreadReset reset;
  for (const AttentionDims& a : {AttentionDims{2, 7, 3, 8}, AttentionDims{1, 129, 2, 64},
                                 AttentionDims{1, 200, 1, 80, false}}) {
    const auto qkv = random_vector(qkv_size(a), 3, -2.0f, 2.0f), dout = random_vector(out_size(a), 4);
    const std::vector<bf16> qkv16 = rounded(qkv);
    const std::vector<float> qkv_rounded = widened(qkv16);
    std::vector<float> out32(out_size(a)), lse32(lse_size(a)), dqkv32(qkv.size());
    attention(a, qkv_rounded.data(), out32.data(), lse32.data());
    const std::vector<bf16> out16 = rounded(out32);
    const std::vector<float> out_rounded = widened(out16);
    attention_backward(a, qkv_rounded.data(), out_rounded.data(), lse32.data(), dout.data(), dqkv32.data());
    std::vector<float> out_ref(out32.size()), lse_ref(lse32.size()), dqkv_ref(qkv.size());
    ref::attention(a, qkv_rounded.data(), out_ref.data(), lse_ref.data());
    ref::attention_backward(a, qkv_rounded.data(), dout.data(), dqkv_ref.data());
    for (int threads : testing::kThreadCounts) {
      set_threads(threads);
      const std::string at = where(a) + " threads=" + std::to_string(threads);
      if (attention_runs_on_amx(a)) {  // P and dS rounded for the AMX products: bounds, not bits
        std::vector<float> out(out32.size(), NAN), lse(lse32.size(), NAN), dqkv(qkv.size(), NAN);
        attention_bf16(a, {.rounded = qkv16.data()}, out.data(), lse.data());
        attention_backward_bf16(a, {.rounded = qkv16.data()}, {.rounded = out16.data()}, lse.data(), dout.data(),
                                dqkv.data());
        EXPECT_LE(relative_error(out, out_ref), 1e-2) << at;
        EXPECT_LE(relative_error(lse, lse_ref), 1e-5) << at;
        EXPECT_LE(relative_error(dqkv, dqkv_ref), 3e-2) << at;
        continue;
      }
      for (bool stored : {false, true}) {
        const Bf16Operand qkv_in = stored ? Bf16Operand{.rounded = qkv16.data()} : Bf16Operand{.f32 = qkv.data()};
        std::vector<float> out(out32.size(), NAN), lse(lse32.size(), NAN), dqkv(qkv.size(), NAN);
        attention_bf16(a, qkv_in, out.data(), lse.data());
        const Bf16Operand out_in = stored ? Bf16Operand{.rounded = out16.data()} : Bf16Operand{.f32 = out.data()};
        attention_backward_bf16(a, qkv_in, out_in, lse.data(), dout.data(), dqkv.data());
        EXPECT_EQ(out, out32) << at;
        EXPECT_EQ(lse, lse32) << at;
        EXPECT_EQ(dqkv, dqkv32) << at;
      }
    }
    EXPECT_LE(relative_error(out32, out_ref), 1e-5) << where(a);
    EXPECT_LE(relative_error(dqkv32, dqkv_ref), 1e-2) << where(a);
  }
}

TEST(Attention, FirstPositionOutputsItsOwnValueAndLseItsScore) {
  // Query 0 sees only key 0: out[b, 0, h] = v[b, 0, h], lse = q·k/√D.
  const AttentionDims a{2, 5, 2, 3};
  const int64_t C = a.H * a.D;
  auto qkv = random_vector(qkv_size(a), 4);
  std::vector<float> out(out_size(a)), lse(lse_size(a));
  attention(a, qkv.data(), out.data(), lse.data());
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.H; ++h) {
      const float* q = qkv.data() + b * a.T * 3 * C + h * a.D;
      double score = 0;
      for (int64_t d = 0; d < a.D; ++d) {
        EXPECT_FLOAT_EQ(out[b * a.T * C + h * a.D + d], q[2 * C + d]);
        score += double(q[d]) * q[C + d];
      }
      EXPECT_NEAR(lse[(b * a.H + h) * a.T], score / std::sqrt(3.0), 1e-5);
    }
}

// Finite differences at small sizes, causal and not, through the tiled
// kernels themselves (the loss is the tiled forward).
TEST(Attention, BackwardMatchesFiniteDifferences) {
  for (const AttentionDims& a : {AttentionDims{2, 7, 2, 5, true}, AttentionDims{1, 33, 1, 8, true},
                                 AttentionDims{1, 19, 2, 4, false}}) {
    auto qkv = random_vector(qkv_size(a), 5), r = random_vector(out_size(a), 6);
    auto loss = [&](const std::vector<float>& in) {
      std::vector<float> out(r.size()), lse(lse_size(a));
      attention(a, in.data(), out.data(), lse.data());
      return testing::dot(r, out);
    };
    std::vector<float> out(r.size()), lse(lse_size(a)), dqkv(qkv.size());
    attention(a, qkv.data(), out.data(), lse.data());
    attention_backward(a, qkv.data(), out.data(), lse.data(), r.data(), dqkv.data());
    for (uint64_t seed : {7, 8, 9}) EXPECT_TRUE(directional_derivative_matches(loss, qkv, dqkv, seed)) << where(a);
  }
}

}  // namespace
}  // namespace px::kernels

namespace px::kernels {
namespace {

// WIP: the AMX forward against the reference on the same rounded q, k, v;
// P is rounded to bf16 for P·V, so within bf16's bound, and lse (from fp32
// scores of bf16 values) within fp32's.
TEST(Attention, AmxForwardMatchesTheReferenceOnRoundedOperands) {
  for (const AttentionDims& a : {AttentionDims{1, 1, 1, 64}, AttentionDims{2, 7, 3, 32}, AttentionDims{1, 129, 2, 64},
                                 AttentionDims{1, 300, 2, 64, false}, AttentionDims{2, 520, 1, 64}}) {
    if (!attention_runs_on_amx(a)) GTEST_SKIP() << "no AMX-BF16 here";
    const auto qkv = random_vector(qkv_size(a), 3, -2.0f, 2.0f);
    const std::vector<bf16> qkv16 = rounded(qkv);
    const std::vector<float> qkv_rounded = widened(qkv16);
    std::vector<float> out(out_size(a), NAN), lse(lse_size(a), NAN), out_ref(out.size()), lse_ref(lse.size());
    attention_bf16_amx(a, {.rounded = qkv16.data()}, out.data(), lse.data());
    ref::attention(a, qkv_rounded.data(), out_ref.data(), lse_ref.data());
    EXPECT_LE(relative_error(out, out_ref), 1e-2) << where(a);
    EXPECT_LE(relative_error(lse, lse_ref), 1e-5) << where(a);
    // Backward: P and dS rounded to bf16 for the three gradient products.
    const auto dout = random_vector(out_size(a), 4);
    std::vector<float> dqkv(qkv.size(), NAN), dqkv_ref(qkv.size());
    attention_backward_bf16_amx(a, {.rounded = qkv16.data()}, {.f32 = out.data()}, lse.data(), dout.data(), dqkv.data());
    ref::attention_backward(a, qkv_rounded.data(), dout.data(), dqkv_ref.data());
    EXPECT_LE(relative_error(dqkv, dqkv_ref), 3e-2) << where(a);
  }
}

}  // namespace
}  // namespace px::kernels
