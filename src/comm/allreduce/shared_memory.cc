// Shared-memory allreduce for ranks of one host (shared_memory.h). The buffer
// goes through in stages of up to kStageBytes; per stage every rank copies
// its chunk into its staging buffer, then
//  - small chunks (<= kSmallBytes): every rank reduces all p staging buffers
//    into its own output — one synchronization per stage;
//  - larger chunks: rank r reduces part r (block(chunk, p, r)) of all p
//    buffers into its own staging buffer and publishes it; every rank then
//    copies the p reduced parts out. Reads: n + n/p·p, writes: n + n/p per
//    rank, all from cache-resident staging buffers, so DRAM traffic is close
//    to one memcpy of n per rank.
// kStages staging buffers let the copy-in of stage s+1 overlap peers still
// reducing stage s. Reductions combine sources in rank order: same bits on
// every rank. avg is fused (scaled by 1/p while reducing).
#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/algorithms.h"
#include "core/error.h"
#include "comm/reduction.h"
#include "comm/shared_memory.h"

namespace px::comm::detail {
namespace {
constexpr size_t kSmallBytes = 32 << 10;
}

void allreduce_shared_memory(Communicator& comm, Buffer data, Reduction op) {
  const int p = comm.size(), r = comm.rank();
  constexpr std::string_view kName = "allreduce(shared_memory)";
  if (p == 1 || data.count == 0) {
    if (op == Reduction::avg) scale(data.data, data.count, data.dtype, 1.0f / p);
    return;
  }
  SharedMemoryGroup* shm = comm.shared_memory();
  if (!shm) fail("{}: the ranks of this group do not share a host; use ring or hierarchical", kName);
  const size_t element = data.element_size();
  const int64_t chunk = SharedMemoryGroup::kStageBytes / element;
  const float factor = op == Reduction::avg ? 1.0f / p : 1.0f;
  const uint64_t signature = stage_signature(0, data.count, static_cast<int>(data.dtype),
                                             static_cast<int>(op), 0);
  std::vector<const void*> sources(p);
  int index = 0;
  for (int64_t begin = 0; begin < data.count; begin += chunk, ++index) {
    const int64_t n = std::min(chunk, data.count - begin);
    const uint64_t s = shm->next_stage++;
    const Step step{kName, index};
    shm->stage_from_all(s, data.at(begin), n * element, signature, step);
    if (n * element <= kSmallBytes) {
      for (int q = 0; q < p; ++q) sources[q] = shm->stage(q, s);
      reduce_many(data.at(begin), sources.data(), p, n, data.dtype, op, factor);
      shm->publish(SharedMemoryGroup::done, s + 1);
      continue;
    }
    const Block part = block(n, p, r);
    for (int q = 0; q < p; ++q) sources[q] = shm->stage(q, s) + part.begin * element;
    reduce_many(shm->stage(r, s) + part.begin * element, sources.data(), p, part.count,
                data.dtype, op, factor);
    shm->publish(SharedMemoryGroup::reduced, s + 1);
    for (int i = 0; i < p; ++i) {
      const int q = (r + i) % p;  // own part first: it is already in cache
      const Block theirs = block(n, p, q);
      shm->wait_for(q, SharedMemoryGroup::reduced, s + 1, step);
      copy_bytes(data.at(begin + theirs.begin), shm->stage(q, s) + theirs.begin * element,
                  theirs.count * element);
    }
    shm->publish(SharedMemoryGroup::done, s + 1);
  }
}

}  // namespace px::comm::detail
