// Naive all-to-all: every rank posts all p-1 sends and receives at once (one
// step; (p-1)/p · n elements sent per rank). Simple, but p-1 messages in
// flight per rank.
#include <cstring>
#include <vector>

#include "comm/algorithms.h"

namespace px::comm::detail {

void all_to_all_naive(Communicator& comm, const void* input, Buffer output) {
  const int p = comm.size(), r = comm.rank();
  const uint32_t tag = comm.next_tag();
  const size_t bytes = output.bytes() / p;  // one block
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output.data);
  copy_bytes(out + r * bytes, in + r * bytes, bytes);
  std::vector<Request> requests;
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    requests.push_back(comm.irecv(q, tag, out + q * bytes, bytes));
    requests.push_back(comm.isend(q, tag, in + q * bytes, bytes));
  }
  comm.wait_all(requests, Step{"all_to_all(naive)", 0});
}

}  // namespace px::comm::detail
