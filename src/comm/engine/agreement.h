// Agreement: how the ranks of a CommEngine learn, before each slice, which
// jobs every rank has submitted. Each rank sends every other rank a
// fixed-size Announcement (its submitted count and the signatures of the
// first kWindow jobs past the last agreed count); every rank then computes
// the same new agreed count — the minimum of the counts, capped by the
// window — and checks that every rank submitted the same newly agreed jobs.
// All ranks see the same announcements, so they reach the same verdict.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace px::comm {

struct Announcement {
  static constexpr int kWindow = 16;
  int64_t submitted = 0;
  // Signatures of jobs agreed .. agreed + kWindow - 1; 0 past `submitted`.
  std::array<uint64_t, kWindow> signatures{};
};

// Sends `mine` to every other rank and receives theirs: the result is indexed
// by group rank. Waits by polling with growing sleeps (up to 1 ms), not by
// spinning: ranks wait here for peers that are still computing. Throws
// px::Error on the communicator's timeout or a failed peer.
std::vector<Announcement> exchange_announcements(Communicator& comm, const Announcement& mine);

// The new agreed count (>= agreed). Throws px::Error on every rank (the same
// verdict: job and differing ranks) when the ranks' signatures of a newly
// agreed job differ.
// `describe(k)` describes this rank's job k (for the message).
int64_t agree_on_jobs(std::span<const Announcement> all, int64_t agreed, int rank,
                      const std::function<std::string(int64_t)>& describe);

}  // namespace px::comm
