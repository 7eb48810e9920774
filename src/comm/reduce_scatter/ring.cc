// Ring reduce-scatter: p-1 steps; at step s rank r sends block (r-s-1) to its
// right neighbour and reduces block (r-s-2) arriving from its left, so after
// the last step block r is complete on rank r. Each rank sends (p-1)/p · n
// elements. Blocks go in kSegmentBytes segments: the reduction of one segment
// overlaps the transfer of the next.
#include <algorithm>
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduction.h"

namespace px::comm::detail {

void ring_reduce_scatter_phase(Communicator& comm, Buffer data, Reduction op, uint32_t tag,
                               std::string_view collective) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  const size_t element = data.element_size();
  const int64_t segment = std::max<int64_t>(1, kSegmentBytes / element);
  char* incoming = static_cast<char*>(comm.scratch(block(data.count, p, 0).count * element, 1));
  std::vector<Request> sends, recvs;
  for (int s = 0; s < p - 1; ++s) {
    const Step step{collective, s};
    const Block out = block(data.count, p, (r - s - 1 + 2 * p) % p);
    const Block in = block(data.count, p, (r - s - 2 + 2 * p) % p);
    sends.clear();
    recvs.clear();
    for (int64_t at = 0; at < in.count; at += segment)
      recvs.push_back(comm.irecv(left, tag, incoming + at * element,
                                 std::min(segment, in.count - at) * element));
    for (int64_t at = 0; at < out.count; at += segment)
      sends.push_back(comm.isend(right, tag, data.at(out.begin + at),
                                 std::min(segment, out.count - at) * element));
    for (size_t i = 0; i < recvs.size(); ++i) {
      comm.wait(recvs[i], step);
      int64_t at = static_cast<int64_t>(i) * segment;
      reduce_into(data.at(in.begin + at), incoming + at * element,
                  std::min(segment, in.count - at), data.dtype, op);
    }
    comm.wait_all(sends, step);
  }
}

void reduce_scatter_ring(Communicator& comm, Buffer data, Buffer output, Reduction op) {
  ring_reduce_scatter_phase(comm, data, op, comm.next_tag(), "reduce_scatter(ring)");
  Block mine = block(data.count, comm.size(), comm.rank());
  std::copy_n(data.at(mine.begin), mine.count * data.element_size(),
              static_cast<char*>(output.data));
}

}  // namespace px::comm::detail
