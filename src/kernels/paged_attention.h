// Causal attention for serving (vLLM's paged attention, Orca's selective
// batching): one iteration's tokens of several sequences, each attending to
// its own earlier tokens held in a paged KV cache plus its tokens of this
// iteration. Legend: N tokens this iteration (every sequence's rows,
// concatenated, no padding), H heads, D head dim (C = H*D), NB blocks in
// the pool, BS tokens per block.
//   qkv    (N, 3, H, D)       this iteration's q, k, v (the c_attn output)
//   cache  (NB, 2, H, BS, D)  block b's keys (index 0) and values (1), one
//                             head's BS tokens contiguous
//   out    (N, H, D)
// A segment is one sequence's rows [first_row, first_row + rows): its
// tokens at positions [start, start + rows), the positions [0, start)
// already in the cache at slots blocks[p / BS] * BS + p % BS. Row i of a
// segment attends to positions [0, start + i]. A row's result depends on
// its own sequence alone, never on what else is in the batch.
#pragma once

#include <cstdint>
#include <span>

namespace px::kernels {

struct AttentionSegment {
  int64_t first_row = 0;
  int64_t rows = 0;
  int64_t start = 0;                  // positions already in the cache
  const int32_t* blocks = nullptr;    // block table: ceil(start / BS) entries read
};

void paged_attention(int64_t H, int64_t D, int64_t block_tokens, const float* qkv, const float* cache,
                     std::span<const AttentionSegment> segments, float* out);

namespace ref {
void paged_attention(int64_t H, int64_t D, int64_t block_tokens, const float* qkv, const float* cache,
                     std::span<const AttentionSegment> segments, float* out);
}  // namespace ref

}  // namespace px::kernels
