// Embedding lookup: out[n, :] = table[ids[n], :] for n < N, table (V, C).
// ids out of [0, V) are a caller bug (checked by the op, not here).
#pragma once

#include <cstdint>

namespace px::kernels {

void embedding(int64_t N, int64_t C, const int32_t* ids, const float* table, float* out);
// dtable[ids[n], :] += dout[n, :]  (accumulates; deterministic order).
void embedding_backward(int64_t N, int64_t C, const int32_t* ids, const float* dout,
                        float* dtable);

namespace ref {
void embedding(int64_t N, int64_t C, const int32_t* ids, const float* table, float* out);
void embedding_backward(int64_t N, int64_t C, const int32_t* ids, const float* dout,
                        float* dtable);
}  // namespace ref

}  // namespace px::kernels
