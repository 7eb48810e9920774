// Dissemination barrier: ceil(log2 p) rounds; in round k rank r signals
// r + 2^k and waits for r - 2^k (mod p). After the last round every rank has
// transitively heard from all others. Works for any p.
#include "comm/algorithms.h"

namespace px::comm::detail {

void barrier_dissemination(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const uint32_t tag = comm.next_tag();
  int round = 0;
  for (int distance = 1; distance < p; distance <<= 1, ++round) {
    Request requests[2] = {comm.irecv((r - distance + p) % p, tag, nullptr, 0),
                           comm.isend((r + distance) % p, tag, nullptr, 0)};
    comm.wait_all(requests, Step{"barrier(dissemination)", round});
  }
}

}  // namespace px::comm::detail
