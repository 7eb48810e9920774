// Ring allreduce = ring reduce-scatter + ring allgather over the same blocks:
// 2(p-1) steps, each rank sends 2(p-1)/p · n elements — bandwidth-optimal, and
// any p works (blocks differ by at most one element when p does not divide n).
#include "comm/algorithms.h"

namespace px::comm::detail {

void allreduce_ring(Communicator& comm, Buffer data, Reduction op) {
  uint32_t tag = comm.next_tag();
  ring_reduce_scatter_phase(comm, data, op, tag, "allreduce(ring) reduce-scatter");
  ring_allgather_phase(comm, data, tag, "allreduce(ring) allgather");
}

}  // namespace px::comm::detail
