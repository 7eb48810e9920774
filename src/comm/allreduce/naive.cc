// Naive allreduce: every rank sends its whole buffer to every other rank and
// reduces all p contributions itself, in rank order (so every rank computes
// identical bits). One step; each rank sends (p-1) · n elements. Runs in
// chunks of kChunkBytes so the receive space stays p · kChunkBytes.
#include <algorithm>
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduction.h"

namespace px::comm::detail {
namespace {
constexpr size_t kChunkBytes = 1 << 20;
}

void allreduce_naive(Communicator& comm, Buffer data, Reduction op) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const uint32_t tag = comm.next_tag();
  const size_t element = data.element_size();
  const int64_t chunk = std::max<int64_t>(1, kChunkBytes / element);
  char* slots = static_cast<char*>(comm.scratch(p * chunk * element, 2));
  std::vector<Request> sends, recvs;
  std::vector<const void*> sources(p);
  int index = 0;
  for (int64_t begin = 0; begin < data.count; begin += chunk, ++index) {
    const Step step{"allreduce(naive)", index};
    const int64_t n = std::min(chunk, data.count - begin);
    sends.clear();
    recvs.clear();
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      recvs.push_back(comm.irecv(q, tag, slots + q * chunk * element, n * element));
      sends.push_back(comm.isend(q, tag, data.at(begin), n * element));
    }
    comm.wait_all(recvs, step);
    comm.wait_all(sends, step);  // before the result overwrites what they read
    for (int q = 0; q < p; ++q) sources[q] = q == r ? data.at(begin) : slots + q * chunk * element;
    reduce_many(data.at(begin), sources.data(), p, n, data.dtype, op);
  }
}

}  // namespace px::comm::detail
