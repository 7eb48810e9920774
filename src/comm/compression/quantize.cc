#include "comm/compression/quantize.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/rng.h"

namespace px::comm::compression::detail {
namespace {

int64_t chunks(int64_t n) { return (n + kScaleChunk - 1) / kScaleChunk; }

float read_scale(const uint8_t* at) {
  float scale;
  std::memcpy(&scale, at, sizeof(float));
  return scale;
}

}  // namespace

uint64_t noise_seed(uint64_t seed, uint64_t step, int rank) {
  return splitmix64(splitmix64(seed ^ 0x696e7438ull) ^ step) ^ splitmix64(static_cast<uint64_t>(rank) + 1);
}

size_t int8_payload_bytes(int64_t n) { return static_cast<size_t>(n + chunks(n) * 4); }

void encode_int8(std::span<const float> x, uint64_t noise_seed, std::vector<uint8_t>& out) {
  const int64_t n = static_cast<int64_t>(x.size());
  out.resize(int8_payload_bytes(n));
  uint8_t* at = out.data();
  for (int64_t begin = 0; begin < n; begin += kScaleChunk) {
    const int64_t end = std::min(n, begin + kScaleChunk);
    float largest = 0.0f;
    bool finite = true;
    for (int64_t i = begin; i < end; ++i) {
      finite = finite && std::isfinite(x[i]);
      largest = std::max(largest, std::fabs(x[i]));
    }
    // A NaN or inf scale makes the whole chunk decode to NaN: the failure
    // shows up in the result instead of being rounded away.
    const float scale = finite ? largest / 127.0f : std::numeric_limits<float>::quiet_NaN();
    std::memcpy(at, &scale, sizeof(float));
    at += sizeof(float);
    const float inverse = scale > 0.0f && finite ? 1.0f / scale : 0.0f;
    for (int64_t i = begin; i < end; ++i) {
      float q = std::floor(x[i] * inverse + counter_uniform(noise_seed, static_cast<uint64_t>(i)));
      // |x| <= 127·scale, so q is in [-127, 127] up to rounding.
      q = std::isnan(q) ? 0.0f : std::clamp(q, -127.0f, 127.0f);
      *at++ = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
}

void decode_int8(std::span<const uint8_t> payload, std::span<float> decoded) {
  const int64_t n = static_cast<int64_t>(decoded.size());
  PX_CHECK_EQ(payload.size(), int8_payload_bytes(n));
  const uint8_t* at = payload.data();
  for (int64_t begin = 0; begin < n; begin += kScaleChunk) {
    const int64_t end = std::min(n, begin + kScaleChunk);
    const float scale = read_scale(at);
    at += sizeof(float);
    for (int64_t i = begin; i < end; ++i)
      decoded[i] = static_cast<float>(static_cast<int8_t>(*at++)) * scale;
  }
}

size_t sign_payload_bytes(int64_t n) {
  size_t bytes = 0;
  for (int64_t begin = 0; begin < n; begin += kScaleChunk)
    bytes += 4 + (std::min(kScaleChunk, n - begin) + 7) / 8;
  return bytes;
}

void encode_sign(std::span<const float> x, std::vector<uint8_t>& out) {
  const int64_t n = static_cast<int64_t>(x.size());
  out.assign(sign_payload_bytes(n), 0);
  uint8_t* at = out.data();
  for (int64_t begin = 0; begin < n; begin += kScaleChunk) {
    const int64_t end = std::min(n, begin + kScaleChunk);
    double total = 0.0;
    for (int64_t i = begin; i < end; ++i) total += std::fabs(x[i]);
    const float scale = static_cast<float>(total / static_cast<double>(end - begin));
    std::memcpy(at, &scale, sizeof(float));
    at += sizeof(float);
    for (int64_t i = begin; i < end; ++i)
      if (!std::signbit(x[i])) at[(i - begin) / 8] |= static_cast<uint8_t>(1u << ((i - begin) % 8));
    at += (end - begin + 7) / 8;
  }
}

void decode_sign(std::span<const uint8_t> payload, std::span<float> decoded) {
  const int64_t n = static_cast<int64_t>(decoded.size());
  PX_CHECK_EQ(payload.size(), sign_payload_bytes(n));
  const uint8_t* at = payload.data();
  for (int64_t begin = 0; begin < n; begin += kScaleChunk) {
    const int64_t end = std::min(n, begin + kScaleChunk);
    const float scale = read_scale(at);
    at += sizeof(float);
    // Eight elements per byte through a table of their signs (vectorizes;
    // a branch per bit costs ~10x more).
    static const auto signs = [] {
      std::array<std::array<float, 8>, 256> table{};
      for (int byte = 0; byte < 256; ++byte)
        for (int bit = 0; bit < 8; ++bit) table[byte][bit] = (byte >> bit & 1) ? 1.0f : -1.0f;
      return table;
    }();
    for (int64_t i = begin; i < end; i += 8) {
      const std::array<float, 8>& sign = signs[at[(i - begin) / 8]];
      const int64_t count = std::min<int64_t>(8, end - i);
      for (int64_t b = 0; b < count; ++b) decoded[i + b] = sign[b] * scale;
    }
    at += (end - begin + 7) / 8;
  }
}

}  // namespace px::comm::compression::detail
