// What the attention kernels share (kernels/attention.cc, attention_bf16.cc,
// block_attention.cc, paged_attention.cc, attention_tiles.cc): per-thread
// scratch, each kind in its own buffer so that a caller's gathered operands
// survive the tile loop's, and the spread of (batch, head) pairs over the
// pool with BLAS single-threaded inside.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/blas.h"
#include "kernels/fast_math.h"

namespace px::kernels::detail {

enum class Scratch {
  tiles,     // the tile loop's scores and probabilities
  stats,     // the tile loop's running row max and sum
  rows,      // a caller's per-row values (backward's delta, a discarded lse)
  operands,  // a caller's gathered or widened q, k, v
};

// `n` elements of this thread's scratch of kind `which`.
template <typename T = float>
T* attention_scratch(int64_t n, Scratch which = Scratch::tiles) {
  thread_local std::vector<T> buffers[4];
  std::vector<T>& buffer = buffers[static_cast<int>(which)];
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

template <typename Body>
void for_each_head(int64_t B, int64_t H, Body body) {
  SerialBlasScope serial;
  px::parallel_for(0, B * H, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) body(i / H, i % H, i);
  });
}

}  // namespace px::kernels::detail
