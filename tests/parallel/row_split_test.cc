// The data axis' row split (parallel/row_split.h): what every rank, worker
// and micro-batch reads its rows by.
#include "parallel/row_split.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace px::parallel
