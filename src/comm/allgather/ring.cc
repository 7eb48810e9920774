// Ring allgather: p-1 steps; at step s rank r forwards block (r-s) to its
// right neighbour and receives block (r-s-1) from its left, in place. Each
// rank sends (p-1)/p · n elements.
#include <algorithm>
#include <vector>

#include "comm/algorithms.h"

namespace px::comm::detail {

void ring_allgather_phase(Communicator& comm, Buffer data, uint32_t tag,
                          std::string_view collective) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  const size_t element = data.element_size();
  const int64_t segment = std::max<int64_t>(1, kSegmentBytes / element);
  std::vector<Request> requests;
  for (int s = 0; s < p - 1; ++s) {
    const Step step{collective, s};
    const Block out = block(data.count, p, (r - s + p) % p);
    const Block in = block(data.count, p, (r - s - 1 + p) % p);
    requests.clear();
    for (int64_t at = 0; at < in.count; at += segment)
      requests.push_back(comm.irecv(left, tag, data.at(in.begin + at),
                                    std::min(segment, in.count - at) * element));
    for (int64_t at = 0; at < out.count; at += segment)
      requests.push_back(comm.isend(right, tag, data.at(out.begin + at),
                                    std::min(segment, out.count - at) * element));
    comm.wait_all(requests, step);
  }
}

void allgather_ring(Communicator& comm, Buffer data) {
  ring_allgather_phase(comm, data, comm.next_tag(), "allgather(ring)");
}

}  // namespace px::comm::detail
