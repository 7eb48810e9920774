#include "comm/compression/sparse.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "comm/reduction.h"
#include "core/error.h"

namespace px::comm::compression::detail {
namespace {

enum : uint8_t { kGaps = 0, kBitmap = 1 };

// The ordering key of an element: its magnitude, NaN above everything.
inline float magnitude(float x) {
  return std::isnan(x) ? std::numeric_limits<float>::infinity() : std::fabs(x);
}

size_t varint_size(uint64_t value) {
  size_t size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

void put_varint(std::vector<uint8_t>& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<uint8_t>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<uint8_t>(value));
}

// Reads bytes of one payload, failing with one message for any malformation.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, int from_rank) : bytes_(bytes), from_rank_(from_rank) {}
  uint8_t byte() {
    need(1);
    return bytes_[at_++];
  }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = byte();
      value |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return value;
    }
    malformed("a varint longer than 64 bits");
  }
  const uint8_t* take(size_t count) {
    need(count);
    const uint8_t* p = bytes_.data() + at_;
    at_ += count;
    return p;
  }
  void expect_end() {
    if (at_ != bytes_.size()) malformed("trailing bytes");
  }
  [[noreturn]] void malformed(std::string_view what) const {
    fail("sparse gradient from rank {} is malformed ({} at byte {} of {}); do the ranks disagree "
         "on the tensor's size?",
         from_rank_, what, at_, bytes_.size());
  }

 private:
  void need(size_t count) {
    if (bytes_.size() - at_ < count) malformed("payload ends early");
  }
  std::span<const uint8_t> bytes_;
  int from_rank_;
  size_t at_ = 0;
};

}  // namespace

int64_t topk_count(double fraction, int64_t n) {
  if (n == 0) return 0;
  return std::clamp<int64_t>(std::llround(fraction * static_cast<double>(n)), 1, n);
}

std::vector<uint32_t> select_topk(std::span<const float> x, int64_t k) {
  const int64_t n = static_cast<int64_t>(x.size());
  k = std::clamp<int64_t>(k, 0, n);
  std::vector<uint32_t> indices;
  indices.reserve(k);
  if (k == 0) return indices;
  // The k-th largest magnitude, then: everything above it, and the first
  // elements equal to it (lowest indices) until k are taken. Two passes keep
  // the indices ascending without a sort.
  std::vector<float> keys(n);
  for (int64_t i = 0; i < n; ++i) keys[i] = magnitude(x[i]);
  std::nth_element(keys.begin(), keys.begin() + (n - k), keys.end());
  const float kth = keys[n - k];
  int64_t above = 0;
  for (int64_t i = n - k + 1; i < n; ++i) above += keys[i] > kth;
  int64_t ties = k - above;  // elements equal to kth that we keep
  for (int64_t i = 0; i < n; ++i) {
    const float m = magnitude(x[i]);
    if (m > kth || (m == kth && ties-- > 0)) indices.push_back(static_cast<uint32_t>(i));
  }
  return indices;
}

std::vector<uint32_t> select_threshold(std::span<const float> x, float threshold) {
  std::vector<uint32_t> indices;
  for (size_t i = 0; i < x.size(); ++i)
    if (magnitude(x[i]) >= threshold) indices.push_back(static_cast<uint32_t>(i));
  return indices;
}

float sparse_value(float x) { return bf16_to_f32(f32_to_bf16(x)); }

void encode_sparse(std::span<const float> x, std::span<const uint32_t> indices,
                   std::vector<uint8_t>& out) {
  const uint64_t n = x.size();
  PX_CHECK(n <= std::numeric_limits<uint32_t>::max(), "sparse gradients index with 32 bits");
  size_t gap_bytes = 0;
  for (size_t i = 0; i < indices.size(); ++i)
    gap_bytes += varint_size(i == 0 ? indices[0] : indices[i] - indices[i - 1] - 1);
  const size_t bitmap_bytes = (n + 7) / 8;
  const uint8_t mode = gap_bytes <= bitmap_bytes ? kGaps : kBitmap;

  out.clear();
  out.reserve(1 + 10 + std::min(gap_bytes, bitmap_bytes) + 2 * indices.size());
  out.push_back(mode);
  put_varint(out, indices.size());
  if (mode == kGaps) {
    for (size_t i = 0; i < indices.size(); ++i)
      put_varint(out, i == 0 ? indices[0] : indices[i] - indices[i - 1] - 1);
  } else {
    const size_t at = out.size();
    out.resize(at + bitmap_bytes, 0);
    for (uint32_t index : indices) out[at + index / 8] |= static_cast<uint8_t>(1u << (index % 8));
  }
  const size_t at = out.size();
  out.resize(at + 2 * indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const uint16_t value = f32_to_bf16(x[indices[i]]);
    std::memcpy(out.data() + at + 2 * i, &value, 2);
  }
}

void add_sparse(std::span<const uint8_t> payload, std::span<float> dense, int from_rank) {
  const uint64_t n = dense.size();
  Reader reader(payload, from_rank);
  const uint8_t mode = reader.byte();
  if (mode != kGaps && mode != kBitmap) reader.malformed("an unknown index mode");
  const uint64_t nnz = reader.varint();
  if (nnz > n) reader.malformed("more pairs than elements");
  std::vector<uint32_t> indices(nnz);
  if (mode == kGaps) {
    uint64_t next = 0;  // smallest index the next pair may have
    for (uint64_t i = 0; i < nnz; ++i) {
      const uint64_t index = next + reader.varint();
      if (index >= n) reader.malformed("an index past the end");
      indices[i] = static_cast<uint32_t>(index);
      next = index + 1;
    }
  } else {
    const uint8_t* bitmap = reader.take((n + 7) / 8);
    uint64_t found = 0;
    for (uint64_t i = 0; i < n; ++i)
      if (bitmap[i / 8] >> (i % 8) & 1u) {
        if (found == nnz) reader.malformed("more bits set than pairs");
        indices[found++] = static_cast<uint32_t>(i);
      }
    if (found != nnz) reader.malformed("fewer bits set than pairs");
  }
  const uint8_t* values = reader.take(2 * nnz);
  reader.expect_end();
  for (uint64_t i = 0; i < nnz; ++i) {
    uint16_t value;
    std::memcpy(&value, values + 2 * i, 2);
    dense[indices[i]] += bf16_to_f32(value);
  }
}

}  // namespace px::comm::compression::detail
