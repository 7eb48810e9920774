#include "parallel/row_split.h"

#include "core/error.h"

namespace px::parallel {

namespace {
constexpr int64_t kMaxShare = int64_t{1} << 20;
}  // namespace

void check_row_shares(std::span<const int64_t> shares, int world, const char* what) {
  if (shares.empty()) return;
  if (static_cast<int64_t>(shares.size()) != world)
    fail("{}: {} row shares for {} data-parallel ranks, expected one per rank", what, shares.size(), world);
  for (size_t r = 0; r < shares.size(); ++r)
    if (shares[r] < 1 || shares[r] > kMaxShare)
      fail("{}: row share {} of rank {} is out of range, expected an integer in [1, {}]", what, shares[r], r,
           kMaxShare);
}

RowRange shard_rows(int64_t rows, int rank, int world, std::span<const int64_t> shares) {
  if (world < 1 || rank < 0 || rank >= world)
    fail("row split: rank {} of world size {} is invalid, expected 0 <= rank < world", rank, world);
  if (shares.empty()) return {.begin = rank * rows / world, .end = (rank + 1) * rows / world};
  check_row_shares(shares, world, "row split");
  int64_t before = 0, total = 0;
  for (int r = 0; r < world; ++r) {
    if (r < rank) before += shares[static_cast<size_t>(r)];
    total += shares[static_cast<size_t>(r)];
  }
  const int64_t through = before + shares[static_cast<size_t>(rank)];
  return {.begin = rows * before / total, .end = rows * through / total};
}

}  // namespace px::parallel
