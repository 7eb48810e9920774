// Shared-memory reduce to a root, stage by stage (shared_memory.h): every rank
// copies its chunk into its staging buffer, rank r reduces part r of all
// buffers into its own, and the root copies the p reduced parts out. The
// intra-node step of hierarchical allreduce. Handles avg itself.
#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/algorithms.h"
#include "core/error.h"
#include "comm/reduction.h"
#include "comm/shared_memory.h"

namespace px::comm::detail {

void reduce_shared_memory(Communicator& comm, Buffer data, Reduction op, int root) {
  const int p = comm.size(), r = comm.rank();
  constexpr std::string_view kName = "reduce(shared_memory)";
  if (p == 1 || data.count == 0) {
    if (op == Reduction::avg) scale(data.data, data.count, data.dtype, 1.0f / p);
    return;
  }
  SharedMemoryGroup* shm = comm.shared_memory();
  if (!shm) fail("{}: the ranks of this group do not share a host; use tree", kName);
  const size_t element = data.element_size();
  const int64_t chunk = SharedMemoryGroup::kStageBytes / element;
  const float factor = op == Reduction::avg ? 1.0f / p : 1.0f;
  const uint64_t signature = stage_signature(1, data.count, static_cast<int>(data.dtype),
                                             static_cast<int>(op), root);
  std::vector<const void*> sources(p);
  int index = 0;
  for (int64_t begin = 0; begin < data.count; begin += chunk, ++index) {
    const int64_t n = std::min(chunk, data.count - begin);
    const uint64_t s = shm->next_stage++;
    const Step step{kName, index};
    shm->stage_from_all(s, data.at(begin), n * element, signature, step);
    const Block part = block(n, p, r);
    for (int q = 0; q < p; ++q) sources[q] = shm->stage(q, s) + part.begin * element;
    reduce_many(shm->stage(r, s) + part.begin * element, sources.data(), p, part.count,
                data.dtype, op, factor);
    shm->publish(SharedMemoryGroup::reduced, s + 1);
    if (r == root) {
      for (int i = 0; i < p; ++i) {
        const int q = (r + i) % p;
        const Block theirs = block(n, p, q);
        shm->wait_for(q, SharedMemoryGroup::reduced, s + 1, step);
        copy_bytes(data.at(begin + theirs.begin), shm->stage(q, s) + theirs.begin * element,
                    theirs.count * element);
      }
    }
    shm->publish(SharedMemoryGroup::done, s + 1);
  }
}

}  // namespace px::comm::detail
