// Link: one rank's outgoing link in a bandwidth-limited in-process world
// (InprocOptions::link_gbps), modelled as a serial pipe: messages leave in
// posting order, each occupying the link for 8·bytes/gbps ns after the
// previous one has left. Thread-safe (a rank's caller and engine threads
// share its link, as they would share a NIC).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <mutex>

namespace px::comm::inproc {

class Link {
 public:
  using Clock = std::chrono::steady_clock;

  // Reserves the link for a message of `bytes` posted now; returns when its
  // last bit arrives: max(now, link free) + 8·bytes / (gbps · 1e9).
  Clock::time_point reserve(size_t bytes, double gbps) {
    const auto duration =
        std::chrono::nanoseconds(std::llround(static_cast<double>(bytes) * 8.0 / gbps));
    std::lock_guard lock(mutex_);
    free_ = std::max(Clock::now(), free_) + duration;
    return free_;
  }

 private:
  std::mutex mutex_;
  Clock::time_point free_{};
};

}  // namespace px::comm::inproc
