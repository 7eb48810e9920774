// Naive broadcast: the root sends the whole buffer to each rank (one step;
// the root sends (p-1) · n elements).
#include <vector>

#include "comm/algorithms.h"

namespace px::comm::detail {

void broadcast_naive(Communicator& comm, Buffer data, int root) {
  const int p = comm.size(), r = comm.rank();
  const uint32_t tag = comm.next_tag();
  std::vector<Request> requests;
  if (r == root) {
    for (int q = 0; q < p; ++q)
      if (q != root) requests.push_back(comm.isend(q, tag, data.data, data.bytes()));
  } else {
    requests.push_back(comm.irecv(root, tag, data.data, data.bytes()));
  }
  comm.wait_all(requests, Step{"broadcast(naive)", 0});
}

}  // namespace px::comm::detail
