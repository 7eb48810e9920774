#include "comm/compression/exchange.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "comm/collectives.h"
#include "core/error.h"

namespace px::comm::compression::detail {

uint64_t ring_allreduce_bytes(int64_t n, size_t element_size, int p, int r) {
  if (p == 1) return 0;
  const int64_t own = block(n, p, r).count, right = block(n, p, (r + 1) % p).count;
  return static_cast<uint64_t>((n - own) + (n - right)) * element_size;
}

uint64_t ring_allreduce_sum(Communicator& comm, Buffer data) {
  allreduce(comm, data, Reduction::sum, {.algorithm = Algorithm::ring});
  return ring_allreduce_bytes(data.count, data.element_size(), comm.size(), comm.rank());
}

uint64_t allgather_payloads(Communicator& comm, std::span<const uint8_t> mine, bool fixed_size,
                            Gathered& out, std::string_view collective) {
  const int p = comm.size(), r = comm.rank();
  uint64_t sent = 0;
  std::vector<uint32_t> sizes(p, 0);
  if (mine.size() > std::numeric_limits<uint32_t>::max())
    fail("{}: payload of {} bytes exceeds the 4 GiB limit of one exchange", collective,
         mine.size());
  sizes[r] = static_cast<uint32_t>(mine.size());
  std::vector<Request> requests;
  if (fixed_size) {
    std::fill(sizes.begin(), sizes.end(), sizes[r]);
  } else if (p > 1) {
    const uint32_t tag = comm.next_tag();
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      requests.push_back(comm.irecv(q, tag, &sizes[q], sizeof(uint32_t)));
      requests.push_back(comm.isend(q, tag, &sizes[r], sizeof(uint32_t)));
      sent += sizeof(uint32_t);
    }
    comm.wait_all(requests, Step{collective, 0});
    requests.clear();
  }
  out.offsets.assign(p + 1, 0);
  for (int q = 0; q < p; ++q) out.offsets[q + 1] = out.offsets[q] + sizes[q];
  out.bytes.resize(out.offsets[p]);
  if (!mine.empty()) std::memcpy(out.bytes.data() + out.offsets[r], mine.data(), mine.size());
  if (p == 1) return sent;
  const uint32_t tag = comm.next_tag();
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    requests.push_back(comm.irecv(q, tag, out.bytes.data() + out.offsets[q], sizes[q]));
    requests.push_back(comm.isend(q, tag, mine.data(), mine.size()));
    sent += mine.size();
  }
  comm.wait_all(requests, Step{collective, 1});
  return sent;
}

}  // namespace px::comm::compression::detail
