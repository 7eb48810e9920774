#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "runtime/decode/block_pool.h"

namespace px::decode {
namespace {

TEST(BlockPool, GrowsATableByWholeBlocksAndRefusesWhatDoesNotFit) {
  BlockPool pool(5, 16);
  std::vector<int32_t> a, b;
  EXPECT_TRUE(pool.grow(a, 1));
  EXPECT_EQ(a.size(), 1u);
  EXPECT_TRUE(pool.grow(a, 16));  // still one block
  EXPECT_EQ(a.size(), 1u);
  EXPECT_TRUE(pool.grow(a, 17));
  EXPECT_EQ(a.size(), 2u);
  EXPECT_FALSE(pool.grow(b, 16 * 3 + 1));  // four blocks, three free
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.free_blocks(), 3);
  EXPECT_TRUE(pool.grow(b, 48));
  EXPECT_EQ(pool.free_blocks(), 0);
  EXPECT_EQ(pool.allocate(), -1);
  pool.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pool.used_blocks(), 3);
}

TEST(BlockPool, NoBlockHasTwoOwnersUnderRandomUse) {
  BlockPool pool(37, 4);
  std::mt19937_64 rng(3);
  std::vector<std::vector<int32_t>> tables(9);
  std::vector<int64_t> lengths(tables.size(), 0);
  for (int step = 0; step < 5000; ++step) {
    const size_t s = rng() % tables.size();
    if (rng() % 5 == 0) {
      pool.release(tables[s]);
      lengths[s] = 0;
    } else if (pool.grow(tables[s], lengths[s] + 1 + static_cast<int64_t>(rng() % 6))) {
      lengths[s] = static_cast<int64_t>(tables[s].size()) * pool.block_tokens();
    }
    std::set<int32_t> held;
    int64_t count = 0;
    for (const auto& t : tables)
      for (int32_t b : t) {
        EXPECT_TRUE(held.insert(b).second) << "block " << b << " held twice at step " << step;
        ++count;
      }
    ASSERT_EQ(count, pool.used_blocks());
  }
}

TEST(BlockPool, ReturningABlockNotHeldIsABug) {
  BlockPool pool(2, 8);
  std::vector<int32_t> t;
  ASSERT_TRUE(pool.grow(t, 8));
  std::vector<int32_t> copy = t;
  pool.release(t);
  EXPECT_THROW(pool.release(copy), InternalError);
}

TEST(BlockPool, ABadSizeIsNamed) {
  try {
    BlockPool(0, 16);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0 blocks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BlockPool(4, 0), Error);
}

}  // namespace
}  // namespace px::decode
