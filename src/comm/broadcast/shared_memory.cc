// Shared-memory broadcast, stage by stage (shared_memory.h): the root copies
// a chunk into its staging buffer and publishes it; every other rank copies
// it out. Each rank moves n once; the root's chunk stays in cache for all.
#include <algorithm>
#include <cstring>

#include "comm/algorithms.h"
#include "core/error.h"
#include "comm/shared_memory.h"

namespace px::comm::detail {

void broadcast_shared_memory(Communicator& comm, Buffer data, int root) {
  const int p = comm.size(), r = comm.rank();
  constexpr std::string_view kName = "broadcast(shared_memory)";
  if (p == 1 || data.count == 0) return;
  SharedMemoryGroup* shm = comm.shared_memory();
  if (!shm) fail("{}: the ranks of this group do not share a host; use tree", kName);
  const size_t element = data.element_size();
  const int64_t chunk = SharedMemoryGroup::kStageBytes / element;
  const uint64_t signature =
      stage_signature(2, data.count, static_cast<int>(data.dtype), 0, root);
  int index = 0;
  for (int64_t begin = 0; begin < data.count; begin += chunk, ++index) {
    const int64_t n = std::min(chunk, data.count - begin);
    const uint64_t s = shm->next_stage++;
    const Step step{kName, index};
    shm->acquire(s, step);
    shm->signature(r, s) = signature;
    if (r == root) {
      copy_bytes(shm->stage(r, s), data.at(begin), n * element);
      shm->publish(SharedMemoryGroup::ready, s + 1);
    } else {
      shm->wait_for(root, SharedMemoryGroup::ready, s + 1, step);
      shm->check_signature(root, s, step);
      copy_bytes(data.at(begin), shm->stage(root, s), n * element);
    }
    shm->publish(SharedMemoryGroup::done, s + 1);
  }
}

}  // namespace px::comm::detail
