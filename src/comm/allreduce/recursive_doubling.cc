// Recursive doubling: log2 p steps; at step k each rank exchanges its whole
// partial result with the rank 2^k away and combines. Each rank sends
// n · log2 p elements: latency-optimal, bandwidth-poor — for small messages.
// Non-powers of two fold in/out (power_of_two.h): two extra steps of n.
// Partners combine the same two values (a+b = b+a exactly), so every rank
// ends with identical bits.
#include "comm/algorithms.h"
#include "comm/allreduce/power_of_two.h"
#include "comm/reduction.h"

namespace px::comm::detail {

void allreduce_recursive_doubling(Communicator& comm, Buffer data, Reduction op) {
  const int p = comm.size();
  if (p == 1 || data.count == 0) return;
  constexpr std::string_view kName = "allreduce(recursive_doubling)";
  const uint32_t tag = comm.next_tag();
  void* temp = comm.scratch(data.bytes(), 1);
  const PowerOfTwo fold(p, comm.rank());
  fold_in(comm, fold, data, op, temp, tag, kName);
  int step = 1;
  if (fold.index >= 0) {
    for (int mask = 1; mask < fold.q; mask <<= 1, ++step) {
      const int peer = fold.rank_of(fold.index ^ mask);
      Request requests[2] = {comm.irecv(peer, tag, temp, data.bytes()),
                             comm.isend(peer, tag, data.data, data.bytes())};
      comm.wait_all(requests, Step{kName, step});
      reduce_into(data.data, temp, data.count, data.dtype, op);
    }
  }
  fold_out(comm, fold, data, tag, kName, step);
}

}  // namespace px::comm::detail
