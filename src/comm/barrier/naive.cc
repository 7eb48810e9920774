// Naive barrier: every rank sends an empty message to rank 0 and waits for
// rank 0's release (two steps, 2(p-1) messages at rank 0).
#include <vector>

#include "comm/algorithms.h"

namespace px::comm::detail {

void barrier_naive(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const uint32_t tag = comm.next_tag();
  std::vector<Request> requests;
  if (r == 0) {
    for (int q = 1; q < p; ++q) requests.push_back(comm.irecv(q, tag, nullptr, 0));
    comm.wait_all(requests, Step{"barrier(naive) arrive", 0});
    requests.clear();
    for (int q = 1; q < p; ++q) requests.push_back(comm.isend(q, tag, nullptr, 0));
    comm.wait_all(requests, Step{"barrier(naive) release", 1});
  } else {
    Request arrive = comm.isend(0, tag, nullptr, 0);
    Request release = comm.irecv(0, tag, nullptr, 0);
    comm.wait(arrive, Step{"barrier(naive) arrive", 0});
    comm.wait(release, Step{"barrier(naive) release", 1});
  }
}

}  // namespace px::comm::detail
