// The data axis' row split: which rows of a global batch each data-parallel
// rank (or parameter-server worker, or micro-batch) holds. The lowering
// (localize: shard contexts, micro-batches) and the tasks that serve each
// rank its rows read the same rule, so a rank's batch is the part of the
// global batch its Program expects.
#pragma once

#include <cstdint>

namespace px::parallel {

// Rank `rank` of `world` takes rows [begin, end) of a global batch of `rows`
// rows: begin = rank * rows / world, end = (rank + 1) * rows / world (integer
// division). Shards are disjoint, cover the batch, and differ in size by at
// most one; a rank gets an empty shard when rows < world.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const RowRange&) const = default;
};
// px::Error unless 0 <= rank < world.
RowRange shard_rows(int64_t rows, int rank, int world);

}  // namespace px::parallel
