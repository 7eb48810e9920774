#include "runtime/decode/decode_batch.h"

#include "core/error.h"

namespace px::decode {

DecodeBatch make_batch(std::span<const SequenceChunk> chunks, int64_t table_entries, int64_t block_tokens) {
  DecodeBatch batch;
  batch.table_entries = table_entries;
  const int64_t width = 3 + table_entries;
  for (const SequenceChunk& c : chunks) {
    PX_CHECK(c.rows >= 1 && c.start >= 0 && c.start + c.rows <= static_cast<int64_t>(c.tokens.size()),
             "a chunk of positions [{}, {}) of a sequence of {} tokens", c.start, c.start + c.rows, c.tokens.size());
    const int64_t blocks_needed = (c.start + c.rows + block_tokens - 1) / block_tokens;
    PX_CHECK(blocks_needed <= static_cast<int64_t>(c.blocks.size()) && blocks_needed <= table_entries,
             "a chunk reaching position {} holds {} blocks of {} tokens (table of {})", c.start + c.rows,
             c.blocks.size(), block_tokens, table_entries);
    const auto first = static_cast<int32_t>(batch.rows());
    for (int64_t i = 0; i < c.rows; ++i) {
      const int64_t p = c.start + i;
      batch.tokens.push_back(c.tokens[static_cast<size_t>(p)]);
      batch.positions.push_back(static_cast<int32_t>(p));
      batch.slots.push_back(static_cast<int32_t>(c.blocks[static_cast<size_t>(p / block_tokens)] * block_tokens +
                                                 p % block_tokens));
      batch.segments.push_back(first);
      batch.segments.push_back(static_cast<int32_t>(c.rows));
      batch.segments.push_back(static_cast<int32_t>(c.start));
      for (int64_t b = 0; b < table_entries; ++b)
        batch.segments.push_back(b < static_cast<int64_t>(c.blocks.size()) ? c.blocks[static_cast<size_t>(b)] : 0);
    }
  }
  PX_CHECK_EQ(static_cast<int64_t>(batch.segments.size()), batch.rows() * width);
  return batch;
}

}  // namespace px::decode
