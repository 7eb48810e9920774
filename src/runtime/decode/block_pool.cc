#include "runtime/decode/block_pool.h"

#include "core/error.h"

namespace px::decode {

BlockPool::BlockPool(int64_t blocks, int64_t block_tokens) : block_tokens_(block_tokens) {
  if (blocks < 1) fail("the KV cache has {} blocks; it needs at least one", blocks);
  if (block_tokens < 1) fail("--block-tokens is {}, expected >= 1", block_tokens);
  owned_.assign(static_cast<size_t>(blocks), false);
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t BlockPool::allocate() {
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  owned_[static_cast<size_t>(b)] = true;
  return b;
}

bool BlockPool::grow(std::vector<int32_t>& table, int64_t tokens) {
  const int64_t need = blocks_for(tokens) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  if (need > free_blocks()) return false;
  for (int64_t i = 0; i < need; ++i) table.push_back(allocate());
  return true;
}

void BlockPool::release(std::vector<int32_t>& table) {
  // Returned in reverse so that the next allocate hands out the same blocks again in order.
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const int32_t b = *it;
    PX_CHECK(b >= 0 && b < static_cast<int32_t>(owned_.size()) && owned_[static_cast<size_t>(b)],
             "KV block {} returned but not held", b);
    owned_[static_cast<size_t>(b)] = false;
    free_.push_back(b);
  }
  table.clear();
}

}  // namespace px::decode
