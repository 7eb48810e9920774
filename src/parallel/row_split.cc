#include "parallel/row_split.h"

#include "core/error.h"

namespace px::parallel {

RowRange shard_rows(int64_t rows, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world)
    fail("row split: rank {} of world size {} is invalid, expected 0 <= rank < world", rank, world);
  return {.begin = rank * rows / world, .end = (rank + 1) * rows / world};
}

}  // namespace px::parallel
