// Block i of n elements cut into p blocks: the first n % p blocks hold one
// element more. The one uneven cut: collectives' chunks (comm/buffer.h:
// reduce-scatter's output on rank r is block r whatever the algorithm),
// shards of a split dim (parallel/shard.h) and context parallelism's
// blocks of a sequence (graph/ops/seq_blocks.cc) all use it.
#pragma once

#include <cstdint>

namespace px {

struct Block {
  int64_t begin = 0;
  int64_t count = 0;
};

inline Block block(int64_t n, int p, int i) {
  int64_t base = n / p, extra = n % p;
  return {i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

}  // namespace px
