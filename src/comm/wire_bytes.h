// WireBytes: what one rank of a collective hands to the transport, per link
// class, for the algorithm that runs and the codec its payload goes
// through (copies through a shared-memory segment are none: the shared
// memory algorithm sends nothing, hierarchical only its leaders' ring). It is the one formula: the lowering stamps it on every
// communicating instruction (parallel/program.h) and the executor, the
// simulator and the flight recorder read it there.
//
// Per rank, not per busiest rank: a hierarchical allreduce's node leaders
// send the ring between nodes, the others only inside their node; a
// ring's rank sends everything to its successor, so only the ranks whose
// successor is on another host send between hosts. Other algorithms'
// bytes all count between hosts when the group spans them (their
// partners change step by step: an upper bound). Where the ranks sit:
// WireQuery::hosts (the run's), else blocks of ranks_per_node, else one
// host (every byte within it; a reader that knows better, the simulator,
// moves them to its link).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/collectives.h"
#include "comm/compression/spec.h"

namespace px::comm {

struct WireBytes {
  int64_t intra_node = 0;
  int64_t inter_node = 0;
  int64_t total() const { return intra_node + inter_node; }
  bool operator==(const WireBytes&) const = default;
};

struct WireQuery {
  Collective collective = Collective::allreduce;
  // The algorithm (automatic: the ring's bytes, the α-β model's
  // reference), sharded parameter servers' count, hierarchical's node size.
  CollectiveOptions options;
  int64_t bytes = 0;  // the collective's n: the whole buffer (allgather: its output)
  // Bytes per element (0: unknown). Known, a ring's bytes are exact per
  // rank: it sends every block of the split but its own (reduce-scatter),
  // its successor's (allgather) or both (allreduce), and uneven blocks
  // differ by an element; else (p-1)/p of n each way.
  int element_bytes = 0;
  int ranks = 1;
  int rank = 0;       // this rank's place in the group
  // Each group rank's host (AlgorithmMenu::hosts, mapped to the group);
  // empty: blocks of options.ranks_per_node, or all on one host.
  std::vector<int> hosts;
  // Hierarchical: a node's ranks reduce and broadcast through a shared
  // segment (nothing on a link), else by a tree over the transport.
  bool node_shared_memory = true;
  // A compressed allreduce of a (rows x cols) float gradient.
  compression::Spec codec;
  int64_t codec_rows = 1, codec_cols = 1;
};

// A compressed allreduce's: the sum of its codec's steps
// (comm/compression/recipe.h).
WireBytes wire_bytes(const WireQuery& query);

}  // namespace px::comm
