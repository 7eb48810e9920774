// Dense quantizers: every element is sent, in fewer bits.
//  - int8: chunks of kScaleChunk elements, each an f32 scale = max|x| / 127
//    and one int8 per element, rounded stochastically (floor(x/scale + u),
//    u uniform in [0,1) from a counter hash), so E[decoded] = x.
//  - sign: chunks of kScaleChunk elements, each an f32 scale = mean |x| and
//    one bit per element (1: +scale, 0: -scale; signSGD with a scale).
// Payload layout per chunk: f32 scale, then the chunk's values (int8) or bits
// (ceil(chunk/8) bytes, bit i of the chunk in byte i/8, bit i%8).
// These payloads cannot be summed while encoded, so every rank allgathers
// them and decodes and sums in rank order. Internal to comm/compression.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace px::comm::compression::detail {

constexpr int64_t kScaleChunk = 256;

size_t int8_payload_bytes(int64_t n);
// noise_seed selects the rounding draws; element i draws counter_uniform(noise_seed, i).
void encode_int8(std::span<const float> x, uint64_t noise_seed, std::vector<uint8_t>& out);
// decoded = the values the payload stands for (dense.size() elements).
void decode_int8(std::span<const uint8_t> payload, std::span<float> decoded);

size_t sign_payload_bytes(int64_t n);
void encode_sign(std::span<const float> x, std::vector<uint8_t>& out);
void decode_sign(std::span<const uint8_t> payload, std::span<float> decoded);

// The rounding seed of one rank at one step: distinct per rank (independent
// noise averages out in the sum) and per step.
uint64_t noise_seed(uint64_t seed, uint64_t step, int rank);

}  // namespace px::comm::compression::detail
