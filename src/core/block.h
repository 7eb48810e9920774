// Block i of n elements cut into p blocks: the first n % p blocks hold one
// element more. The one uneven cut: collectives' chunks (comm/buffer.h:
// reduce-scatter's output on rank r is block r whatever the algorithm),
// shards of a split dim (parallel/shard.h) and context parallelism's
// blocks of a sequence (graph/ops/seq_blocks.cc) all use it, and its
// zigzag pairs of blocks (zigzag_block).
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

// Zigzag block i of n elements cut into p (graph/placement.h's Z): blocks i
// and 2p-1-i of the 2p blocks, early then late. Context parallelism's
// causal balance: block i's early tokens see few keys, its late ones many.
struct ZigzagBlock {
  Block early, late;
  int64_t count() const { return early.count + late.count; }
};

inline ZigzagBlock zigzag_block(int64_t n, int p, int i) {
  return {block(n, 2 * p, i), block(n, 2 * p, 2 * p - 1 - i)};
}

}  // namespace px
