// Pairwise all-to-all: p-1 steps; at step k rank r sends its block for
// r+k and receives from r-k (mod p), so each rank has one exchange in flight
// and every link carries one message per step. Sends (p-1)/p · n per rank.
#include <cstring>

#include "comm/algorithms.h"

namespace px::comm::detail {

void all_to_all_pairwise(Communicator& comm, const void* input, Buffer output) {
  const int p = comm.size(), r = comm.rank();
  const uint32_t tag = comm.next_tag();
  const size_t bytes = output.bytes() / p;
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output.data);
  copy_bytes(out + r * bytes, in + r * bytes, bytes);
  for (int k = 1; k < p; ++k) {
    const int to = (r + k) % p, from = (r - k + p) % p;
    Request requests[2] = {comm.irecv(from, tag, out + from * bytes, bytes),
                           comm.isend(to, tag, in + to * bytes, bytes)};
    comm.wait_all(requests, Step{"all_to_all(pairwise)", k - 1});
  }
}

}  // namespace px::comm::detail
