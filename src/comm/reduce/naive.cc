// Naive reduce: every rank sends its whole buffer to the root, which combines
// the p contributions in rank order. One step; the root receives (p-1) · n.
// Chunked like allreduce/naive.cc to bound the root's receive space.
#include <algorithm>
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduction.h"

namespace px::comm::detail {
namespace {
constexpr size_t kChunkBytes = 1 << 20;
}

void reduce_naive(Communicator& comm, Buffer data, Reduction op, int root) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const uint32_t tag = comm.next_tag();
  const size_t element = data.element_size();
  const int64_t chunk = std::max<int64_t>(1, kChunkBytes / element);
  char* slots = r == root ? static_cast<char*>(comm.scratch(p * chunk * element, 2)) : nullptr;
  std::vector<Request> requests;
  std::vector<const void*> sources(p);
  int index = 0;
  for (int64_t begin = 0; begin < data.count; begin += chunk, ++index) {
    const Step step{"reduce(naive)", index};
    const int64_t n = std::min(chunk, data.count - begin);
    requests.clear();
    if (r != root) {
      requests.push_back(comm.isend(root, tag, data.at(begin), n * element));
      comm.wait_all(requests, step);
      continue;
    }
    for (int q = 0; q < p; ++q) {
      sources[q] = q == r ? data.at(begin) : slots + q * chunk * element;
      if (q != r) requests.push_back(comm.irecv(q, tag, slots + q * chunk * element, n * element));
    }
    comm.wait_all(requests, step);
    reduce_many(data.at(begin), sources.data(), p, n, data.dtype, op);
  }
}

}  // namespace px::comm::detail
