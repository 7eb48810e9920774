// Internal to src/kernels: how much work one parallel_for chunk must hold.
// A fork-join round trip of the core pool costs ~1 us while its workers
// spin (kernels back to back) but ~40 us when they must be woken (measured
// on the 2-core test VM), so a chunk holds ~25-50 us of work: splitting pays
// even from cold, and smaller loops run inline on the caller. Work is
// counted in elements touched.
#pragma once

#include <algorithm>
#include <cstdint>

namespace px::kernels::detail {

// Memory-bound loops (add, scale, relu, bias, copies): ~0.05-0.1 ns/element.
constexpr int64_t kCheapGrain = int64_t{1} << 19;
// Loops with exp, sqrt or divisions per element (gelu, norms, softmax,
// losses, optimizers, dropout hashing): ~0.3-1 ns/element.
constexpr int64_t kGrain = int64_t{1} << 16;

// Rows per chunk so that a chunk holds about `elements` elements.
inline int64_t rows_grain(int64_t row_length, int64_t elements) {
  return std::max<int64_t>(1, elements / std::max<int64_t>(row_length, 1));
}
// Rows per chunk of a row-wise loop of the kGrain kind (norms, softmax, losses).
inline int64_t row_grain(int64_t row_length) { return rows_grain(row_length, kGrain); }

}  // namespace px::kernels::detail
