// Recursive halving-doubling (Rabenseifner): a reduce-scatter by recursive
// halving — log2 p steps, at each the rank keeps half of its current range of
// blocks, sends the other half to the partner and reduces the partner's copy
// of its half — then an allgather by recursive doubling in the reverse order.
// 2·log2 p steps; each rank sends 2(p-1)/p · n elements: bandwidth-optimal
// with log latency. Blocks are block(n, q, i), so participant i ends the
// halving owning block i. Non-powers of two fold in/out (power_of_two.h).
#include "comm/algorithms.h"
#include "comm/allreduce/power_of_two.h"
#include "comm/reduction.h"

namespace px::comm::detail {

void allreduce_halving_doubling(Communicator& comm, Buffer data, Reduction op) {
  const int p = comm.size();
  if (p == 1 || data.count == 0) return;
  constexpr std::string_view kName = "allreduce(halving_doubling)";
  const uint32_t tag = comm.next_tag();
  void* temp = comm.scratch(data.bytes(), 1);
  const PowerOfTwo fold(p, comm.rank());
  fold_in(comm, fold, data, op, temp, tag, kName);
  int step = 1;
  if (fold.index >= 0) {
    const int q = fold.q, me = fold.index;
    // Elements of blocks [first, first + count).
    auto range = [&](int first, int count) {
      Block a = block(data.count, q, first), b = block(data.count, q, first + count - 1);
      return Block{a.begin, b.begin + b.count - a.begin};
    };
    for (int mask = q / 2; mask >= 1; mask >>= 1, ++step) {
      const int partner = me ^ mask;
      const Block keep = range(me & ~(mask - 1), mask);
      const Block give = range(partner & ~(mask - 1), mask);
      const int peer = fold.rank_of(partner);
      Request requests[2] = {comm.irecv(peer, tag, temp, keep.count * data.element_size()),
                             comm.isend(peer, tag, data.at(give.begin),
                                        give.count * data.element_size())};
      comm.wait_all(requests, Step{kName, step});
      reduce_into(data.at(keep.begin), temp, keep.count, data.dtype, op);
    }
    for (int mask = 1; mask < q; mask <<= 1, ++step) {
      const int partner = me ^ mask;
      const Block mine = range(me & ~(mask - 1), mask);
      const Block theirs = range(partner & ~(mask - 1), mask);
      const int peer = fold.rank_of(partner);
      Request requests[2] = {comm.irecv(peer, tag, data.at(theirs.begin),
                                        theirs.count * data.element_size()),
                             comm.isend(peer, tag, data.at(mine.begin),
                                        mine.count * data.element_size())};
      comm.wait_all(requests, Step{kName, step});
    }
  }
  fold_out(comm, fold, data, tag, kName, step);
}

}  // namespace px::comm::detail
