// The paged KV cache's blocks (vLLM's block allocator): a pool of
// `blocks` fixed-size blocks of `block_tokens` token slots each, handed out
// one at a time to a sequence's block table and returned when it finishes,
// stops, is cancelled or preempted. Which block a sequence holds does not
// matter (attention reads through the table), so there is no
// fragmentation: at most block_tokens - 1 slots per sequence stay unused.
#pragma once

#include <cstdint>
#include <vector>

namespace px::decode {

class BlockPool {
 public:
  BlockPool(int64_t blocks, int64_t block_tokens);

  int64_t blocks() const { return static_cast<int64_t>(owned_.size()); }
  int64_t block_tokens() const { return block_tokens_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return blocks() - free_blocks(); }
  // Blocks a sequence of `tokens` tokens holds.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }

  // A free block (the one returned last: its memory is likely warm), or -1 if none.
  int32_t allocate();
  // Grows `table` to hold `tokens` tokens; false (and `table` unchanged) if
  // the pool has too few free blocks.
  bool grow(std::vector<int32_t>& table, int64_t tokens);
  // Returns every block of `table` and empties it. A block not held
  // (freed twice, or never handed out) is a bug: PX_CHECK.
  void release(std::vector<int32_t>& table);

 private:
  int64_t block_tokens_;
  std::vector<int32_t> free_;  // a stack: block 0 on top at first, then the last returned
  std::vector<bool> owned_;    // by block: handed out
};

}  // namespace px::decode
