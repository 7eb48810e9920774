// One decoding iteration's rows, as the decode Program takes them
// (nn/gpt_decode.h): the chunks of several sequences concatenated, each
// chunk a run of consecutive positions of one sequence, with the segment
// table that tells paged attention which rows are whose.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace px::decode {

// Positions [start, start + rows) of a sequence whose tokens (at least
// start + rows of them) are `tokens` and whose KV blocks are `blocks`
// (enough for start + rows positions).
struct SequenceChunk {
  std::span<const int32_t> tokens;
  int64_t start = 0;
  int64_t rows = 0;
  std::span<const int32_t> blocks;
};

struct DecodeBatch {
  std::vector<int32_t> tokens;     // (N)
  std::vector<int32_t> positions;  // (N)
  std::vector<int32_t> segments;   // (N, 3 + table_entries), row-major
  std::vector<int32_t> slots;      // (N): each row's KV slot, block * block_tokens + position % block_tokens
  int64_t table_entries = 0;
  int64_t rows() const { return static_cast<int64_t>(tokens.size()); }
};

DecodeBatch make_batch(std::span<const SequenceChunk> chunks, int64_t table_entries, int64_t block_tokens);

}  // namespace px::decode
