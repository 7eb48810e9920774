#include "comm/engine/agreement.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/error.h"

namespace px::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Polls `request` until done, sleeping between polls: 10 us doubling up to
// 1 ms, so a rank waiting for a peer that is still computing costs no CPU.
// Sleeps, not yields: when ranks outnumber cores a yield hands the core to a
// computing thread until the next scheduler tick (4 ms), a sleep's wake-up
// preempts it.
void wait_sleeping(Communicator& comm, Request& request, int peer, Clock::time_point start) {
  auto sleep = std::chrono::microseconds(10);
  for (;;) {
    bool done = false;
    try {
      done = comm.transport().test(request);
    } catch (const Error& error) {
      fail("agreement round on rank {}: {}: {}", comm.rank(), comm.peer_name(peer), error.what());
    }
    if (done) break;
    std::string failure = comm.transport().failure();
    if (!failure.empty()) fail("agreement round on rank {} stopped: {}", comm.rank(), failure);
    if (Clock::now() - start > comm.timeout())
      fail("agreement round on rank {}: {} did not announce its jobs within the {} ms timeout "
           "(does it submit fewer jobs, or has it stopped?)",
           comm.rank(), comm.peer_name(peer), comm.timeout().count());
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
  }
  request.done = true;
}

}  // namespace

std::vector<Announcement> exchange_announcements(Communicator& comm, const Announcement& mine) {
  const int p = comm.size(), rank = comm.rank();
  std::vector<Announcement> all(p);
  all[rank] = mine;
  if (p == 1) return all;
  const uint32_t tag = comm.next_tag();
  std::vector<Request> receives(p), sends(p);
  for (int peer = 0; peer < p; ++peer) {
    if (peer == rank) continue;
    receives[peer] = comm.irecv(peer, tag, &all[peer], sizeof(Announcement));
    sends[peer] = comm.isend(peer, tag, &all[rank], sizeof(Announcement));
  }
  const auto start = Clock::now();
  for (int peer = 0; peer < p; ++peer) {
    if (peer == rank) continue;
    wait_sleeping(comm, receives[peer], peer, start);
    wait_sleeping(comm, sends[peer], peer, start);
  }
  return all;
}

int64_t agree_on_jobs(std::span<const Announcement> all, int64_t agreed, int rank,
                      const std::function<std::string(int64_t)>& describe) {
  int64_t minimum = all[0].submitted;
  for (const Announcement& a : all) minimum = std::min(minimum, a.submitted);
  const int64_t next = std::min(minimum, agreed + Announcement::kWindow);
  for (int64_t job = agreed; job < next; ++job) {
    const int slot = static_cast<int>(job - agreed);
    // Rank 0's job is the reference; every rank compares the same values.
    std::vector<int> differing;
    for (int r = 1; r < static_cast<int>(all.size()); ++r)
      if (all[r].signatures[slot] != all[0].signatures[slot]) differing.push_back(r);
    if (differing.empty()) continue;
    fail("CommEngine: the ranks submitted different jobs as job #{} (here, on rank {}: {}); "
         "ranks {} differ from rank 0 in name, kind, size, reduction, priority or slice_bytes. "
         "Every rank must submit the same jobs in the same order",
         job, rank, describe(job), fmt::join(differing, ", "));
  }
  return std::max(agreed, next);
}

}  // namespace px::comm
