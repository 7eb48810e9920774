// The codecs alone, against references written independently here: top-k
// and threshold selection, the sparse encoding, int8 stochastic rounding and
// the scaled sign.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "comm/compression/quantize.h"
#include "comm/compression/sparse.h"
#include "comm/reduction.h"
#include "core/error.h"
#include "core/rng.h"

namespace px::comm::compression::detail {
namespace {

std::vector<float> normal_values(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(rng.normal()) * scale;
  return x;
}

// Reference top-k: sort every index by (magnitude descending, index), take k.
std::vector<uint32_t> reference_topk(const std::vector<float>& x, int64_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

TEST(SparseSelection, TopkKeepsExactlyTheKLargestMagnitudes) {
  for (int64_t n : {1, 2, 7, 97, 1000, 65537}) {
    std::vector<float> x = normal_values(n, n);
    // Ties: repeat some magnitudes with both signs, and zeros.
    for (int64_t i = 0; i + 3 < n; i += 5) x[i + 3] = -x[i];
    for (int64_t i = 0; i < n; i += 11) x[i] = 0.0f;
    for (int64_t k : {int64_t{0}, int64_t{1}, n / 100, n / 3, n - 1, n}) {
      if (k < 0) continue;
      SCOPED_TRACE(testing::Message() << "n=" << n << " k=" << k);
      EXPECT_EQ(select_topk(x, k), reference_topk(x, k));
    }
  }
}

TEST(SparseSelection, TopkCountRoundsAndKeepsAtLeastOne) {
  EXPECT_EQ(topk_count(0.01, 1 << 20), 10486);
  EXPECT_EQ(topk_count(0.01, 1000000), 10000);
  EXPECT_EQ(topk_count(0.01, 10), 1);
  EXPECT_EQ(topk_count(1.0, 10), 10);
  EXPECT_EQ(topk_count(0.01, 0), 0);
}

TEST(SparseSelection, NanIsSelectedFirst) {
  std::vector<float> x = {1.0f, std::nanf(""), -3.0f, 2.0f};
  EXPECT_EQ(select_topk(x, 1), (std::vector<uint32_t>{1}));
  EXPECT_EQ(select_topk(x, 2), (std::vector<uint32_t>{1, 2}));
}

TEST(SparseSelection, ThresholdKeepsEveryMagnitudeAtOrAbove) {
  const std::vector<float> x = {0.5f, -0.1f, 0.25f, -0.25f, 0.0f, 0.3f};
  EXPECT_EQ(select_threshold(x, 0.25f), (std::vector<uint32_t>{0, 2, 3, 5}));
  EXPECT_TRUE(select_threshold(x, 1.0f).empty());
}

// Decodes into zeros and compares with x's bf16 values at `indices`.
void expect_round_trip(const std::vector<float>& x, const std::vector<uint32_t>& indices) {
  std::vector<uint8_t> payload;
  encode_sparse(x, indices, payload);
  std::vector<float> dense(x.size(), 0.0f);
  add_sparse(payload, dense, 0);
  std::vector<float> want(x.size(), 0.0f);
  for (uint32_t i : indices) want[i] = bf16_to_f32(f32_to_bf16(x[i]));
  EXPECT_EQ(dense, want);
  // Never more than the cheaper index section plus the values and header.
  const size_t bound = 1 + 5 + std::min((x.size() + 7) / 8, 5 * indices.size()) + 2 * indices.size();
  EXPECT_LE(payload.size(), bound);
}

TEST(SparseEncoding, RoundTripsInGapAndBitmapModes) {
  for (int64_t n : {0, 1, 2, 7, 97, 1000, 4099, 300000}) {
    const std::vector<float> x = normal_values(n, 7 + n);
    for (double fraction : {0.0, 0.001, 0.01, 0.1, 0.5, 1.0}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " fraction=" << fraction);
      expect_round_trip(x, select_topk(x, static_cast<int64_t>(fraction * n)));
    }
  }
  // Indices at both ends, and a huge gap (multi-byte varints).
  std::vector<float> x = normal_values(1 << 20, 3);
  expect_round_trip(x, {0, 1, 200, (1u << 20) - 1});
}

TEST(SparseEncoding, DenseSelectionsUseTheBitmap) {
  const std::vector<float> x = normal_values(8000, 5);
  std::vector<uint8_t> payload;
  encode_sparse(x, select_topk(x, 4000), payload);
  EXPECT_EQ(payload[0], 1);  // bitmap: 1000 bytes instead of 4000 one-byte gaps
  EXPECT_LE(payload.size(), 1 + 3 + 1000 + 8000u);
}

TEST(SparseEncoding, TopOnePercentCostsAboutThreeBytesPerPair) {
  const int64_t n = 1 << 20;
  const std::vector<float> x = normal_values(n, 11);
  std::vector<uint8_t> payload;
  const int64_t k = topk_count(0.01, n);
  encode_sparse(x, select_topk(x, k), payload);
  const double per_pair = static_cast<double>(payload.size()) / k;
  EXPECT_GT(per_pair, 3.0);  // 2 bytes of value + at least one of index
  EXPECT_LT(per_pair, 3.5);
}

TEST(SparseEncoding, MalformedPayloadsNameTheRank) {
  const std::vector<float> x = normal_values(100, 1);
  std::vector<uint8_t> payload;
  encode_sparse(x, select_topk(x, 10), payload);
  std::vector<float> dense(100);
  auto expect_error = [&](std::vector<uint8_t> bad, std::span<float> out, std::string what) {
    try {
      add_sparse(bad, out, 3);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("from rank 3"), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find(what), std::string::npos) << error.what();
    }
  };
  expect_error({payload.begin(), payload.end() - 1}, dense, "payload ends early");
  std::vector<uint8_t> longer = payload;
  longer.push_back(0);
  expect_error(longer, dense, "trailing bytes");
  std::vector<float> smaller(50);
  expect_error(payload, smaller, "past the end");
  std::vector<uint8_t> mode = payload;
  mode[0] = 7;
  expect_error(mode, dense, "unknown index mode");
}

TEST(Int8Quantizer, StochasticRoundingIsUnbiased) {
  // Values across several chunks and magnitudes; the mean of the decoded
  // values over many seeds must approach x (a nearest-rounding quantizer
  // would be off by up to half a step, stochastic rounding by noise only).
  const int64_t n = 3 * kScaleChunk + 17;
  std::vector<float> x = normal_values(n, 2);
  for (int64_t i = 0; i < n; i += 7) x[i] *= 1e-3f;  // far below one step of 127
  const int seeds = 4000;
  std::vector<double> mean(n, 0.0);
  std::vector<uint8_t> payload;
  std::vector<float> decoded(n);
  float largest_step = 0.0f;
  for (int s = 0; s < seeds; ++s) {
    encode_int8(x, noise_seed(99, s, 0), payload);
    ASSERT_EQ(payload.size(), int8_payload_bytes(n));
    decode_int8(payload, decoded);
    for (int64_t i = 0; i < n; ++i) mean[i] += decoded[i] / seeds;
  }
  for (int64_t begin = 0; begin < n; begin += kScaleChunk) {
    float largest = 0.0f;
    for (int64_t i = begin; i < std::min(n, begin + kScaleChunk); ++i)
      largest = std::max(largest, std::fabs(x[i]));
    const float step = largest / 127.0f;
    largest_step = std::max(largest_step, step);
    for (int64_t i = begin; i < std::min(n, begin + kScaleChunk); ++i) {
      // Rounding noise has sd <= step/2; the mean of 4000 draws, <= step/126.
      EXPECT_NEAR(mean[i], x[i], step / 20) << "element " << i;
    }
  }
  // One draw is within one step of x.
  encode_int8(x, noise_seed(1, 2, 3), payload);
  decode_int8(payload, decoded);
  for (int64_t i = 0; i < n; ++i) EXPECT_LE(std::fabs(decoded[i] - x[i]), largest_step * 1.0001f);
}

TEST(Int8Quantizer, ZerosAndDifferentSeedsDrawDifferently) {
  std::vector<float> zeros(300, 0.0f), decoded(300);
  std::vector<uint8_t> payload;
  encode_int8(zeros, 5, payload);
  decode_int8(payload, decoded);
  EXPECT_EQ(decoded, zeros);
  const std::vector<float> x = normal_values(1000, 4);
  std::vector<uint8_t> other;
  encode_int8(x, noise_seed(1, 0, 0), payload);
  encode_int8(x, noise_seed(1, 0, 1), other);
  EXPECT_NE(payload, other);  // ranks draw independent noise
}

TEST(SignQuantizer, DecodesToSignTimesChunkMeanMagnitude) {
  for (int64_t n : {int64_t{1}, int64_t{5}, kScaleChunk, kScaleChunk + 3, int64_t{1000}}) {
    std::vector<float> x = normal_values(n, 8 + n);
    std::vector<uint8_t> payload;
    encode_sign(x, payload);
    EXPECT_EQ(payload.size(), sign_payload_bytes(n));
    std::vector<float> decoded(n);
    decode_sign(payload, decoded);
    for (int64_t begin = 0; begin < n; begin += kScaleChunk) {
      const int64_t end = std::min(n, begin + kScaleChunk);
      double mean = 0.0;
      for (int64_t i = begin; i < end; ++i) mean += std::fabs(x[i]) / (end - begin);
      for (int64_t i = begin; i < end; ++i)
        EXPECT_FLOAT_EQ(decoded[i], x[i] >= 0 ? mean : -mean) << "n=" << n << " element " << i;
    }
  }
  EXPECT_EQ(sign_payload_bytes(1 << 20), (1u << 20) / 8 + 4 * ((1u << 20) / kScaleChunk));
}

}  // namespace
}  // namespace px::comm::compression::detail
