#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.h"

namespace px {
namespace {

std::vector<int32_t> as_vector(const Tensor& t) {
  return {t.data<int32_t>(), t.data<int32_t>() + t.numel()};
}

TEST(GatherRows, CopiesSelectedRowsOfAnyDtype) {
  Tensor t = Tensor::from_vector(Shape{4, 2}, std::vector<int32_t>{0, 1, 10, 11, 20, 21, 30, 31});
  std::vector<int64_t> rows = {3, 0, 3};
  Tensor g = gather_rows(t, rows);
  EXPECT_EQ(g.shape(), (Shape{3, 2}));
  EXPECT_EQ(as_vector(g), (std::vector<int32_t>{30, 31, 0, 1, 30, 31}));
}

TEST(EpochSampler, EachEpochIsAPermutationWithPartialLastBatch) {
  EpochSampler sampler(23, 5, 7);
  EXPECT_EQ(sampler.batches_per_epoch(), 5);
  std::vector<std::vector<int64_t>> epochs(3);
  for (int e = 0; e < 3; ++e) {
    for (int b = 0; b < 5; ++b) {
      EpochBatch batch = sampler.next_batch();
      EXPECT_EQ(batch.epoch, e);
      EXPECT_EQ(batch.batch_in_epoch, b);
      EXPECT_EQ(batch.last_in_epoch, b == 4);
      EXPECT_EQ(batch.indices.size(), b == 4 ? 3u : 5u);
      epochs[e].insert(epochs[e].end(), batch.indices.begin(), batch.indices.end());
    }
    std::vector<int64_t> sorted = epochs[e];
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(23);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all) << "epoch " << e;
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
}

TEST(EpochSampler, FollowsTheDocumentedFisherYatesOverOneRngStream) {
  // docs/data.md: perm = identity; for i = N-1 down to 1: swap(perm[i],
  // perm[rng.below(i + 1)]); the stream continues into the next epoch.
  const int64_t n = 10;
  Rng rng(1234);
  std::vector<int64_t> expected;
  for (int e = 0; e < 2; ++e) {
    std::vector<int64_t> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = n - 1; i >= 1; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
    expected.insert(expected.end(), perm.begin(), perm.end());
  }
  EpochSampler sampler(n, 4, 1234);
  std::vector<int64_t> got;
  for (int b = 0; b < 6; ++b) {
    EpochBatch batch = sampler.next_batch();
    got.insert(got.end(), batch.indices.begin(), batch.indices.end());
  }
  EXPECT_EQ(got, expected);
}

TEST(EpochSampler, SameSeedSameBatchesOtherSeedOthers) {
  EpochSampler a(100, 8, 42), b(100, 8, 42), c(100, 8, 43);
  bool differs = false;
  for (int i = 0; i < 30; ++i) {
    std::vector<int64_t> ia = a.next_batch().indices;
    EXPECT_EQ(ia, b.next_batch().indices);
    differs |= ia != c.next_batch().indices;
  }
  EXPECT_TRUE(differs);
}

TEST(EpochSampler, RestoredStateContinuesExactlyIncludingAtEpochBoundaries) {
  for (int prefix : {0, 1, 4, 5, 6, 12}) {  // 5 batches per epoch: 5 is an epoch boundary
    EpochSampler original(23, 5, 99);
    for (int i = 0; i < prefix; ++i) original.next_batch();
    EpochSamplerState saved = original.state();
    std::vector<EpochBatch> expected;
    for (int i = 0; i < 12; ++i) expected.push_back(original.next_batch());

    // Through JSON, into a sampler built with another seed.
    nlohmann::json json = saved;
    EpochSampler restored(23, 5, 1);
    restored.set_state(json.get<EpochSamplerState>());
    EXPECT_EQ(restored.state(), saved);
    for (int i = 0; i < 12; ++i) {
      EpochBatch batch = restored.next_batch();
      EXPECT_EQ(batch.indices, expected[i].indices) << "prefix " << prefix << " batch " << i;
      EXPECT_EQ(batch.epoch, expected[i].epoch);
      EXPECT_EQ(batch.batch_in_epoch, expected[i].batch_in_epoch);
    }
  }
}

TEST(EpochSampler, RejectsStatesThatCannotBelongToIt) {
  EpochSampler sampler(23, 5, 0);
  EXPECT_THROW(sampler.set_state({.epoch = 0, .position = 24}), Error);
  EXPECT_THROW(sampler.set_state({.epoch = 0, .position = 7}), Error);
  EXPECT_THROW(sampler.set_state({.epoch = -1, .position = 0}), Error);
  EXPECT_NO_THROW(sampler.set_state({.epoch = 3, .position = 23}));
  EXPECT_THROW(nlohmann::json::parse(R"({"epoch": 1})").get<EpochSamplerState>(), Error);
  EXPECT_THROW(nlohmann::json::parse(R"({"epoch": 1, "position": 0, "rng_state": [1, 2]})")
                   .get<EpochSamplerState>(),
               Error);
  EXPECT_THROW(EpochSampler(0, 5, 0), Error);
  EXPECT_THROW(EpochSampler(5, 0, 0), Error);
}

// ---------------------------------------------------------------- text

std::vector<uint8_t> ramp(size_t n) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>((i * 7) % 251);
  return bytes;
}

TEST(WindowSampler, DrawsDocumentedOffsetsWithTargetsShiftedByOne) {
  std::vector<uint8_t> text = ramp(1000);
  const int64_t batch = 4, block = 16;
  WindowSampler sampler(text, batch, block, 2024);
  Rng reference(2024);
  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> expected_offsets(batch);
    for (auto& off : expected_offsets) off = static_cast<int64_t>(reference.below(1000 - block));
    WindowSamplerState before = sampler.state();
    std::vector<int64_t> offsets = sampler.next_offsets();
    EXPECT_EQ(offsets, expected_offsets);
    sampler.set_state(before);
    TokenBatch tb = sampler.next_batch();
    ASSERT_EQ(tb.inputs.shape(), (Shape{batch, block}));
    ASSERT_EQ(tb.targets.shape(), (Shape{batch, block}));
    EXPECT_EQ(tb.inputs.dtype(), DType::i32);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < block; ++t) {
        EXPECT_EQ(tb.inputs.data<int32_t>()[b * block + t], text[offsets[b] + t]);
        EXPECT_EQ(tb.targets.data<int32_t>()[b * block + t], text[offsets[b] + t + 1]);
      }
  }
  EXPECT_EQ(sampler.state().step, 3);
}

TEST(WindowSampler, ReachesTheLastWindowAndNeverPastIt) {
  std::vector<uint8_t> text = ramp(10);
  WindowSampler sampler(text, 64, 8, 3);  // offsets in {0, 1}
  std::set<int64_t> seen;
  for (int i = 0; i < 10; ++i)
    for (int64_t off : sampler.next_offsets()) seen.insert(off);
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1}));
  EXPECT_THROW(WindowSampler(text, 1, 10, 0), Error);  // needs T + 1 = 11 bytes
}

TEST(WindowSampler, RestoredStateContinuesExactly) {
  std::vector<uint8_t> text = ramp(5000);
  WindowSampler original(text, 8, 32, 11);
  for (int i = 0; i < 5; ++i) original.next_batch();
  nlohmann::json saved = original.state();
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < 5; ++i) expected.push_back(as_vector(original.next_batch().inputs));
  WindowSampler restored(text, 8, 32, 0);
  restored.set_state(saved.get<WindowSamplerState>());
  EXPECT_EQ(restored.state().step, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(as_vector(restored.next_batch().inputs), expected[i]);
  EXPECT_THROW(nlohmann::json::parse(R"({"step": 1, "rng_state": "x"})").get<WindowSamplerState>(),
               Error);
}

TEST(ValidationWindows, FixedEvenlySpacedWindowsInFullBatches) {
  std::vector<uint8_t> text = ramp(1000);
  // W = (1000 - 1) / 10 = 99 windows, 99 / 8 = 12 full batches.
  ValidationWindows all(text, 8, 10, 0);
  EXPECT_EQ(all.num_batches(), 12);
  EXPECT_EQ(all.offsets(0), (std::vector<int64_t>{0, 10, 20, 30, 40, 50, 60, 70}));
  EXPECT_EQ(all.offsets(11).back(), 950);
  TokenBatch last = all.batch(11);
  EXPECT_EQ(last.targets.data<int32_t>()[8 * 10 - 1], text[960]);
  ValidationWindows first3(text, 8, 10, 3);
  EXPECT_EQ(first3.num_batches(), 3);
  EXPECT_EQ(as_vector(first3.batch(2).inputs), as_vector(all.batch(2).inputs));
}

TEST(ValidationWindows, FewerWindowsThanBatchGiveOnePartialBatch) {
  std::vector<uint8_t> text = ramp(11);
  ValidationWindows v(text, 8, 5, 0);  // W = 2
  EXPECT_EQ(v.num_batches(), 1);
  EXPECT_EQ(v.windows_per_batch(), 2);
  EXPECT_EQ(v.batch(0).inputs.shape(), (Shape{2, 5}));
  EXPECT_THROW(ValidationWindows(text, 8, 11, 0), Error);
}

}  // namespace
}  // namespace px
