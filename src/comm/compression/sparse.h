// Sparse gradients: which elements a rank sends (top-k by magnitude, or every
// element past a threshold) and the compact encoding of (index, value) pairs.
//
// Payload layout (little-endian):
//   u8 mode | varint nnz | indices | nnz × bf16 values
// indices, by mode:
//   0 (gaps):   nnz varints; the first is index[0], then index[i] - index[i-1] - 1
//   1 (bitmap): ceil(n/8) bytes, bit i set when element i is sent
// The encoder picks whichever index section is smaller, so a payload never
// exceeds 1 + 5 + n/8 + 2·nnz bytes. At top-k 1% the gaps average 100 and
// take ~1.3 bytes, so a pair costs ~3.3 bytes instead of the dense 4 bytes
// per element of the whole gradient. Values are rounded to bf16 (float32's
// range, 8 bits of mantissa); error feedback keeps the rounding error.
// Internal to comm/compression.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace px::comm::compression::detail {

// k for a top-k fraction of n elements: round(fraction · n), at least 1 (when n > 0).
int64_t topk_count(double fraction, int64_t n);
// Ascending indices of the k largest |x[i]|; among equal magnitudes the lower
// index wins; NaN counts as the largest (so it reaches the result and shows).
std::vector<uint32_t> select_topk(std::span<const float> x, int64_t k);
// Ascending indices of every |x[i]| >= threshold (and every NaN).
std::vector<uint32_t> select_threshold(std::span<const float> x, float threshold);

// The value a sent element arrives as (bf16 rounding).
float sparse_value(float x);

// Encodes x[indices] (indices ascending, < x.size()) into out (replaced).
void encode_sparse(std::span<const float> x, std::span<const uint32_t> indices,
                   std::vector<uint8_t>& out);
// dense[index] += value for every pair of the payload; dense.size() is n.
// Throws px::Error naming `from_rank` when the payload is malformed.
void add_sparse(std::span<const uint8_t> payload, std::span<float> dense, int from_rank);

}  // namespace px::comm::compression::detail
