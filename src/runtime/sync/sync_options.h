// How data-parallel replicas synchronize, as a job asks for it: the sync
// room's part of a job (docs/heterogeneous.md, "Partial reduce").
//   ""              bulk-synchronous: the data-parallel trainer's gradient
//                   allreduce every step (runtime/train/), everyone waits
//                   for the slowest rank;
//   partial-reduce  SDPipe's semi-decentralized synchronization: every rank
//                   steps its own copy of the model, and a coordinator on
//                   rank 0 groups the ready ones, who average their
//                   parameters (coordinator.h);
//   gossip          AD-PSGD's decentralized baseline: after each step every
//                   rank averages with one partner, the pairs a random
//                   matching drawn from (seed, step).
#pragma once

#include <string>

namespace px {

struct SyncOptions {
  std::string mode;  // "" (bulk), partial-reduce or gossip
  // partial-reduce: the fewest ready replicas the coordinator groups (it
  // takes every ready one once this many are; fewer only when fewer live).
  int min_group = 2;
  // partial-reduce: a replica more than this many of its steps ahead of the
  // slowest live one is held until that one joins its group.
  int staleness = 8;
  // partial-reduce: every this many global steps (a global step is a global
  // batch's rows, whoever computed them) all replicas average together; 0:
  // only to save a checkpoint and at the end.
  int full_every = 0;
  bool operator==(const SyncOptions&) const = default;
};

// Checks the options for a job of `replicas` replicas (px::Error naming the flag).
void validate(const SyncOptions& options, int replicas);

}  // namespace px
