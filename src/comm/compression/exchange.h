// The byte movements compressed gradients need, each returning the bytes this
// rank handed to the transport (what WireStats reports):
//  - ring_allreduce_sum: float32/f16/bf16 sum over the comm layer's ring
//    algorithm (dense methods, PowerSGD's P and Q);
//  - allgather_payloads: every rank's encoded bytes to every rank, sizes
//    either equal and known (int8, sign) or exchanged first (sparse).
// Internal to comm/compression.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/buffer.h"
#include "comm/communicator.h"

namespace px::comm::compression::detail {

// Bytes rank r sends in a ring allreduce of n elements of `element_size`
// bytes over p ranks: every block but its own (reduce-scatter) and every
// block but its right neighbour's (allgather) — 2(p-1)/p · n · element_size.
uint64_t ring_allreduce_bytes(int64_t n, size_t element_size, int p, int r);

// Sum over the group with Algorithm::ring (so the bytes are known: the
// automatic choice may pick shared memory, which sends nothing through the
// transport). Returns ring_allreduce_bytes.
uint64_t ring_allreduce_sum(Communicator& comm, Buffer data);

// Every rank's payload, by rank; payload(q) is rank q's bytes.
struct Gathered {
  std::vector<uint8_t> bytes;
  std::vector<size_t> offsets;  // p + 1 entries
  std::span<const uint8_t> payload(int rank) const {
    return {bytes.data() + offsets[rank], offsets[rank + 1] - offsets[rank]};
  }
};

// Sends `mine` straight to every other rank and receives theirs (one step,
// p-1 messages each way). With fixed_size, every rank's payload must be
// mine.size() bytes (the transport rejects a mismatch); otherwise the sizes
// are exchanged first (p-1 messages of 4 bytes). Returns the bytes sent:
// (p-1) · mine.size() [+ (p-1) · 4].
uint64_t allgather_payloads(Communicator& comm, std::span<const uint8_t> mine, bool fixed_size,
                            Gathered& out, std::string_view collective);

}  // namespace px::comm::compression::detail
