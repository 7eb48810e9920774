#include "runtime/decode/decode_group.h"

#include <array>

#include "comm/buffer.h"
#include "comm/collectives.h"
#include "core/error.h"

namespace px::decode {
namespace {

comm::Buffer words(std::vector<int32_t>& v) { return {v.data(), static_cast<int64_t>(v.size()), DType::i32}; }

}  // namespace

DecodeGroup::DecodeGroup(comm::Communicator& ranks) : ranks_(ranks), ticks_(ranks.split(0, ranks.rank())) {}

void DecodeGroup::send_header(Tick tick, int64_t rows, int64_t table_entries) {
  PX_CHECK(lead(), "decode group: only the lead (rank 0) sends ticks, not rank {}", rank());
  std::array<int32_t, 3> header{static_cast<int32_t>(tick), static_cast<int32_t>(rows),
                                static_cast<int32_t>(table_entries)};
  comm::broadcast(ticks_, comm::Buffer(header.data(), 3, DType::i32), 0);
}

void DecodeGroup::send_run(const DecodeBatch& batch) {
  send_header(Tick::run, batch.rows(), batch.table_entries);
  // One buffer: tokens, positions, slots (N each), then segments.
  std::vector<int32_t> payload = batch.tokens;
  payload.insert(payload.end(), batch.positions.begin(), batch.positions.end());
  payload.insert(payload.end(), batch.slots.begin(), batch.slots.end());
  payload.insert(payload.end(), batch.segments.begin(), batch.segments.end());
  comm::broadcast(ticks_, words(payload), 0);
}

void DecodeGroup::send_idle() { send_header(Tick::idle, 0, 0); }
void DecodeGroup::send_stop() { send_header(Tick::stop, 0, 0); }

Tick DecodeGroup::receive(DecodeBatch& batch) {
  PX_CHECK(!lead(), "decode group: the lead (rank 0) sends ticks, it does not receive them");
  std::array<int32_t, 3> header{};
  comm::broadcast(ticks_, comm::Buffer(header.data(), 3, DType::i32), 0);
  const Tick tick = static_cast<Tick>(header[0]);
  if (tick == Tick::idle || tick == Tick::stop) return tick;
  PX_CHECK(tick == Tick::run, "decode group: rank {} received tick kind {}, expected run, idle or stop", rank(),
           header[0]);
  const int64_t N = header[1], entries = header[2], width = 3 + entries;
  std::vector<int32_t> payload(static_cast<size_t>(N * (3 + width)));
  comm::broadcast(ticks_, words(payload), 0);
  const auto at = [&](int64_t from, int64_t count) {
    return std::vector<int32_t>(payload.begin() + from, payload.begin() + from + count);
  };
  batch.tokens = at(0, N);
  batch.positions = at(N, N);
  batch.slots = at(2 * N, N);
  batch.segments = at(3 * N, N * width);
  batch.table_entries = entries;
  return Tick::run;
}

}  // namespace px::decode
