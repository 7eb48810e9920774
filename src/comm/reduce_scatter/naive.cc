// Naive reduce-scatter: every rank sends block q of its buffer straight to
// rank q (one step, (p-1)/p · n elements sent per rank) and reduces the p
// copies of its own block in rank order.
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduction.h"

namespace px::comm::detail {

void reduce_scatter_naive(Communicator& comm, Buffer data, Buffer output, Reduction op) {
  const int p = comm.size(), r = comm.rank();
  const uint32_t tag = comm.next_tag();
  const size_t element = data.element_size();
  const Block mine = block(data.count, p, r);
  char* slots = static_cast<char*>(comm.scratch(p * mine.count * element, 2));
  std::vector<Request> requests;
  std::vector<const void*> sources(p);
  for (int q = 0; q < p; ++q) {
    if (q == r) {
      sources[q] = data.at(mine.begin);
      continue;
    }
    const Block theirs = block(data.count, p, q);
    sources[q] = slots + q * mine.count * element;
    requests.push_back(comm.irecv(q, tag, slots + q * mine.count * element, mine.count * element));
    requests.push_back(comm.isend(q, tag, data.at(theirs.begin), theirs.count * element));
  }
  comm.wait_all(requests, Step{"reduce_scatter(naive)", 0});
  reduce_many(output.data, sources.data(), p, mine.count, data.dtype, op);
}

}  // namespace px::comm::detail
