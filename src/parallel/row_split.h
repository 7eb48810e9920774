// The data axis' row split: which rows of a global batch each data-parallel
// rank (or parameter-server worker, or micro-batch) holds. The lowering
// (localize: shard contexts, micro-batches) and the tasks that serve each
// rank its rows read the same rule, so a rank's batch is the part of the
// global batch its Program expects.
//
// Ranks of different speeds take rows in proportion to integer shares (a
// heterogeneous cluster's planner sets them from the ranks' rates): the
// loss is scaled by the global batch (nn/layers.h), so a rank's gradient
// is its rows' summand whatever their number, and uneven shares train
// exactly as even ones do.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace px::parallel {

struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const RowRange&) const = default;
};

// Rank `rank` of `world` takes rows [begin, end) of a global batch of `rows`
// rows: with shares s (one positive integer per rank, S = Σ s), begin =
// rows · Σ_{i<rank} s_i / S and end = rows · Σ_{i<=rank} s_i / S (integer
// division); no shares is every s_i = 1, begin = rank · rows / world.
// Shards are disjoint and cover the batch; even ones differ in size by at
// most one, and a rank gets an empty shard when rows are too few.
// px::Error unless 0 <= rank < world and shares are empty or `world`
// positive integers.
RowRange shard_rows(int64_t rows, int rank, int world, std::span<const int64_t> shares = {});

// The data axis' split as a value the tasks take: `world` ranks, evenly or
// by `shares`.
struct RowSplit {
  int world = 1;
  std::vector<int64_t> shares;  // empty: even; else `world` positive integers
  RowRange rows_of(int64_t rows, int rank) const { return shard_rows(rows, rank, world, shares); }
  bool operator==(const RowSplit&) const = default;
};

// px::Error naming `what` unless `shares` are empty or `world` positive
// integers whose sum times any batch fits in 64 bits (each at most 2^20).
void check_row_shares(std::span<const int64_t> shares, int world, const char* what);

}  // namespace px::parallel
