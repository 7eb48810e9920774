// All-to-all-v, pairwise: p-1 steps; at step k rank r sends its bytes for
// r+k and receives those of r-k (mod p), each with the count both sides
// agreed on; a zero count sends and posts nothing (both sides know it).
// Expert parallelism's routed exchange (runtime/executor/expert_exchange.h)
// moves a mixture of experts' rows with it.
#include <cstring>
#include <numeric>
#include <vector>

#include "comm/algorithms.h"
#include "comm/collectives.h"
#include "core/error.h"

namespace px::comm {

void all_to_all_v(Communicator& comm, const void* input, std::span<const int64_t> send_bytes, void* output,
                  std::span<const int64_t> receive_bytes) {
  const int p = comm.size(), r = comm.rank();
  PX_CHECK(static_cast<int>(send_bytes.size()) == p && static_cast<int>(receive_bytes.size()) == p,
           "all_to_all_v: {} send and {} receive counts for {} ranks", send_bytes.size(), receive_bytes.size(), p);
  std::vector<int64_t> send_at(static_cast<size_t>(p) + 1, 0), receive_at(static_cast<size_t>(p) + 1, 0);
  std::partial_sum(send_bytes.begin(), send_bytes.end(), send_at.begin() + 1);
  std::partial_sum(receive_bytes.begin(), receive_bytes.end(), receive_at.begin() + 1);
  const uint32_t tag = comm.next_tag();
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  PX_CHECK(send_bytes[static_cast<size_t>(r)] == receive_bytes[static_cast<size_t>(r)],
           "all_to_all_v: rank {} sends itself {} bytes but expects {}", r, send_bytes[static_cast<size_t>(r)],
           receive_bytes[static_cast<size_t>(r)]);
  if (receive_bytes[static_cast<size_t>(r)] > 0)
    std::memcpy(out + receive_at[static_cast<size_t>(r)], in + send_at[static_cast<size_t>(r)],
                static_cast<size_t>(receive_bytes[static_cast<size_t>(r)]));
  for (int k = 1; k < p; ++k) {
    const auto to = static_cast<size_t>((r + k) % p), from = static_cast<size_t>((r - k + p) % p);
    std::vector<Request> requests;
    if (receive_bytes[from] > 0)
      requests.push_back(comm.irecv(static_cast<int>(from), tag, out + receive_at[from],
                                    static_cast<size_t>(receive_bytes[from])));
    if (send_bytes[to] > 0)
      requests.push_back(comm.isend(static_cast<int>(to), tag, in + send_at[to], static_cast<size_t>(send_bytes[to])));
    comm.wait_all(requests, Step{"all_to_all_v", k - 1});
  }
}

}  // namespace px::comm
