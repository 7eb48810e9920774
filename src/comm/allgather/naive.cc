// Naive allgather: every rank sends its block to every other rank at once
// (one step; (p-1) · n/p elements sent per rank, p-1 messages in flight).
#include <vector>

#include "comm/algorithms.h"

namespace px::comm::detail {

void allgather_naive(Communicator& comm, Buffer data) {
  const int p = comm.size(), r = comm.rank();
  const uint32_t tag = comm.next_tag();
  const size_t element = data.element_size();
  const Block mine = block(data.count, p, r);
  std::vector<Request> requests;
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    const Block theirs = block(data.count, p, q);
    requests.push_back(comm.irecv(q, tag, data.at(theirs.begin), theirs.count * element));
    requests.push_back(comm.isend(q, tag, data.at(mine.begin), mine.count * element));
  }
  comm.wait_all(requests, Step{"allgather(naive)", 0});
}

}  // namespace px::comm::detail
