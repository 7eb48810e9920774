// The data axis' row split (parallel/row_split.h): what every rank, worker
// and micro-batch reads its rows by.
#include "parallel/row_split.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"

namespace px::parallel {
namespace {

TEST(ShardRows, DisjointContiguousAndCoveringForOneToFiveRanks) {
  for (int world = 1; world <= 5; ++world) {
    for (int64_t rows = 0; rows <= 13; ++rows) {
      int64_t next = 0;
      for (int rank = 0; rank < world; ++rank) {
        RowRange r = shard_rows(rows, rank, world);
        EXPECT_EQ(r.begin, next) << "rows " << rows << " rank " << rank << "/" << world;
        EXPECT_GE(r.size(), rows / world);
        EXPECT_LE(r.size(), rows / world + 1);
        next = r.end;
      }
      EXPECT_EQ(next, rows) << "rows " << rows << " world " << world;
    }
  }
  EXPECT_EQ(shard_rows(10, 1, 4), (RowRange{2, 5}));  // [r*B/R, (r+1)*B/R)
  EXPECT_THROW(shard_rows(10, 4, 4), Error);
  EXPECT_THROW(shard_rows(10, 0, 0), Error);
}

TEST(ShardRows, SharesSplitInProportionDisjointAndCovering) {
  const std::vector<std::vector<int64_t>> cases = {{1}, {3, 1}, {4, 4, 4, 1}, {1, 2, 3, 4, 5}, {7, 7, 7}};
  for (const std::vector<int64_t>& shares : cases) {
    const int world = static_cast<int>(shares.size());
    int64_t total = 0;
    for (int64_t s : shares) total += s;
    for (int64_t rows = 0; rows <= 40; ++rows) {
      int64_t next = 0;
      for (int rank = 0; rank < world; ++rank) {
        const RowRange r = shard_rows(rows, rank, world, shares);
        EXPECT_EQ(r.begin, next) << "rows " << rows << " rank " << rank;
        // Within one row of the exact proportion.
        const double exact = double(rows) * double(shares[static_cast<size_t>(rank)]) / double(total);
        EXPECT_LT(std::abs(double(r.size()) - exact), 1.0 + 1e-9) << "rows " << rows << " rank " << rank;
        next = r.end;
      }
      EXPECT_EQ(next, rows);
    }
  }
  EXPECT_EQ(shard_rows(16, 3, 4, std::vector<int64_t>{4, 4, 4, 1}), (RowRange{14, 16}));  // 16·12/13, 16
  EXPECT_EQ(shard_rows(16, 0, 4, std::vector<int64_t>{4, 4, 4, 1}), (RowRange{0, 4}));    // 16·4/13 = 4
}

TEST(ShardRows, EqualSharesAreTheEvenSplit) {
  for (int world = 1; world <= 6; ++world)
    for (int64_t rows = 0; rows <= 20; ++rows)
      for (int rank = 0; rank < world; ++rank)
        EXPECT_EQ(shard_rows(rows, rank, world, std::vector<int64_t>(static_cast<size_t>(world), 5)),
                  shard_rows(rows, rank, world));
}

TEST(ShardRows, BadSharesAreNamedErrors) {
  EXPECT_THROW(shard_rows(8, 0, 2, std::vector<int64_t>{1, 1, 1}), Error);
  EXPECT_THROW(shard_rows(8, 0, 2, std::vector<int64_t>{1, 0}), Error);
  try {
    check_row_shares(std::vector<int64_t>{2, -1}, 2, "--row-shares");
    FAIL() << "a negative share passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--row-shares: row share -1 of rank 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace px::parallel
