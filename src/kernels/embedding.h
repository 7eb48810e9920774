// Embedding lookup: out[n, :] = table[ids[n] - first, :] for n < N, where
// the table (rows, C) holds vocabulary rows [first, first + rows): a
// vocabulary-parallel shard. Ids outside that range give zeros (another
// shard holds them) and add nothing to the gradient. The whole table is
// first = 0, rows = V; ids outside [0, V) are the op's to reject.
#pragma once

#include <cstdint>

namespace px::kernels {

void embedding(int64_t N, int64_t C, const int32_t* ids, const float* table, int64_t first, int64_t rows,
               float* out);
// dtable[ids[n] - first, :] += dout[n, :] for ids in the table's rows
// (accumulates; deterministic order).
void embedding_backward(int64_t N, int64_t C, const int32_t* ids, const float* dout, int64_t first, int64_t rows,
                        float* dtable);

namespace ref {
void embedding(int64_t N, int64_t C, const int32_t* ids, const float* table, int64_t first, int64_t rows,
               float* out);
void embedding_backward(int64_t N, int64_t C, const int32_t* ids, const float* dout, int64_t first, int64_t rows,
                        float* dtable);
}  // namespace ref

}  // namespace px::kernels
