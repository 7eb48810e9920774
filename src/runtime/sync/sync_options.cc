#include "runtime/sync/sync_options.h"

#include "core/error.h"

namespace px {

void validate(const SyncOptions& s, int replicas) {
  const int ranks = replicas;
  const SyncOptions bulk;
  if (s.mode.empty()) {
    if (s.min_group != bulk.min_group) fail("--sync-group {} needs --sync partial-reduce", s.min_group);
    if (s.staleness != bulk.staleness) fail("--sync-staleness {} needs --sync partial-reduce", s.staleness);
    if (s.full_every != bulk.full_every) fail("--sync-full-every {} needs --sync partial-reduce", s.full_every);
    return;
  }
  if (s.mode != "partial-reduce" && s.mode != "gossip")
    fail("--sync '{}' is unknown: expected partial-reduce or gossip (or leave it out: bulk-synchronous allreduce)",
         s.mode);
  if (ranks < 2) fail("--sync {} synchronizes replicas: expected at least 2, got {}", s.mode, ranks);
  if (ranks > 64) fail("--sync {} runs at most 64 replicas (its groups are 64-bit masks), got {}", s.mode, ranks);
  if (s.mode == "gossip" && (s.min_group != bulk.min_group || s.staleness != bulk.staleness ||
                             s.full_every != bulk.full_every))
    fail("--sync-group, --sync-staleness and --sync-full-every are for --sync partial-reduce; gossip pairs ranks "
         "every step");
  if (s.min_group < 1 || s.min_group > ranks)
    fail("--sync-group {}: expected 1..{} (the job's replicas)", s.min_group, ranks);
  if (s.staleness < 0) fail("--sync-staleness {} must be >= 0", s.staleness);
  if (s.full_every < 0) fail("--sync-full-every {} must be >= 0 (0: only to save and at the end)", s.full_every);
}

}  // namespace px
