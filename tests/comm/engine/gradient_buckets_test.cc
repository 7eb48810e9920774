// GradientBuckets: how gradients are grouped, and that buckets submitted as
// gradients become ready (in any order per rank) sum like plain allreduces.
#include "comm/engine/gradient_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "comm/backends.h"

namespace px::comm {
namespace {

// Backward order over a forward-order arena: layer 2, 1, 0; sizes in floats.
std::vector<GradientSlot> reversed_layers(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> offsets(sizes.size());
  for (size_t i = 1; i < sizes.size(); ++i) offsets[i] = offsets[i - 1] + sizes[i - 1];
  std::vector<GradientSlot> slots;
  for (size_t i = sizes.size(); i-- > 0;)
    slots.push_back({fmt::format("g{}", i), offsets[i], sizes[i], static_cast<int>(i)});
  return slots;
}

std::vector<GradientBucket> buckets_for(const std::vector<GradientSlot>& slots, int64_t bytes,
                                        int64_t arena) {
  std::vector<GradientBucket> result;
  run_inproc(1, [&](Communicator& world) {
    CommEngine engine(world);
    std::vector<float> data(arena);
    result = GradientBuckets(engine, data, slots, bytes).buckets();
  });
  return result;
}

TEST(GradientBuckets, TakesGradientsUntilABucketHoldsAtLeastTheSizeAndKeepsTensorsWhole) {
  // Floats: 100, 100, 5000, 100, 100, 300 (forward order); 1600-byte buckets
  // (400 floats). Backward order g5, g4, ...: g5 + g4 = 400 closes the first
  // bucket; g3 + g2 passes the size inside g2, which is not split; g1 + g0
  // stays below the size and is the last bucket.
  auto slots = reversed_layers({100, 100, 5000, 100, 100, 300});
  auto buckets = buckets_for(slots, 1600, 5700);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].first, 0);  // g5, g4
  EXPECT_EQ(buckets[0].last, 1);
  EXPECT_EQ(buckets[0].offset, 5300);
  EXPECT_EQ(buckets[0].count, 400);
  EXPECT_EQ(buckets[0].priority, 4);
  EXPECT_EQ(buckets[1].count, 5100);  // g3, g2 whole
  EXPECT_EQ(buckets[1].offset, 200);
  EXPECT_EQ(buckets[2].count, 200);   // g1, g0
  EXPECT_EQ(buckets[2].priority, 0);
  EXPECT_EQ(buckets[2].name, "bucket 2 (g1 .. g0)");
  EXPECT_EQ(buckets_for(slots, 0, 5700).size(), 6u);  // one per gradient
}

TEST(GradientBuckets, WithoutMixingPrioritiesEachLayerGetsItsOwnBuckets) {
  std::vector<GradientSlot> slots = {
      {"l1.b", 30, 10, 1}, {"l1.w", 20, 10, 1}, {"l0.b", 10, 10, 0}, {"l0.w", 0, 10, 0}};
  std::vector<GradientBucket> buckets;
  run_inproc(1, [&](Communicator& world) {
    CommEngine engine(world);
    std::vector<float> data(40);
    buckets = GradientBuckets(engine, data, slots, 1 << 20, Reduction::sum, false).buckets();
  });
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].name, "bucket 0 (l1.b .. l1.w)");
  EXPECT_EQ(buckets[1].offset, 0);
  EXPECT_EQ(buckets[1].count, 20);
  EXPECT_EQ(buckets_for(slots, 1 << 20, 40).size(), 1u);  // mixing: one bucket
}

TEST(GradientBuckets, GradientsThatAreNotNeighboursInTheArenaNeverShareABucket) {
  std::vector<GradientSlot> slots = {{"a", 0, 10, 0}, {"b", 20, 10, 0}, {"c", 30, 10, 0}};
  auto buckets = buckets_for(slots, 1 << 20, 40);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[1].offset, 20);
  EXPECT_EQ(buckets[1].count, 20);
}

TEST(GradientBuckets, SumsOverStepsWhateverOrderEachRankMarksGradientsReady) {
  const std::vector<int64_t> sizes = {3, 1000, 7, 4099, 1, 250, 97, 2000};
  const auto slots = reversed_layers(sizes);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  run_inproc(3, [&](Communicator& world) {
    CommEngine engine(world, {.slice_bytes = 2048});
    std::vector<float> arena(total);
    GradientBuckets buckets(engine, arena, slots, 4096);
    std::mt19937 rng(world.rank());
    for (int step = 0; step < 3; ++step) {
      for (int64_t i = 0; i < total; ++i) arena[i] = static_cast<float>(world.rank() + step + i % 5);
      std::vector<int> order(slots.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      std::shuffle(order.begin(), order.end(), rng);
      for (int index : order) buckets.ready(index);
      buckets.wait_for(0);
      buckets.wait();
      for (int64_t i = 0; i < total; ++i)
        ASSERT_EQ(arena[i], static_cast<float>(3 * (step + i % 5) + 0 + 1 + 2)) << i;
    }
  });
}

TEST(GradientBuckets, WaitNamesGradientsNeverMarkedReady) {
  run_inproc(1, [](Communicator& world) {
    CommEngine engine(world);
    std::vector<float> arena(30);
    GradientBuckets buckets(engine, arena, {{"a", 0, 10, 0}, {"b", 10, 10, 0}, {"c", 20, 10, 0}},
                            0);
    buckets.ready(0);
    buckets.ready(2);
    EXPECT_THROW(buckets.wait_for(2), Error);  // b holds its bucket back
    try {
      buckets.wait();
      FAIL() << "expected an error";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("never marked ready this step: b"),
                std::string::npos)
          << error.what();
    }
  });
}

}  // namespace
}  // namespace px::comm
