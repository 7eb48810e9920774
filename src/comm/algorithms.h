// The algorithm functions behind collectives.h, one file each under
// comm/<collective>/<algorithm>.cc. Internal: call the collectives.h API.
// Conventions: every function draws its own tag (comm.next_tag()) unless it
// is a phase taking one; Reduction::avg is treated as sum (collectives.cc
// scales by 1/p afterwards) except where noted; p = comm.size(), r = comm.rank().
#pragma once

#include <string_view>

#include "comm/buffer.h"
#include "comm/collectives.h"
#include "comm/communicator.h"

namespace px::comm::detail {

// Bytes per pipelined segment of the transport algorithms: big enough to
// amortize a message's latency, small enough to stay in L2 while reduced.
constexpr size_t kSegmentBytes = 256 << 10;

// allreduce/
void allreduce_naive(Communicator& comm, Buffer data, Reduction op);
void allreduce_parameter_server(Communicator& comm, Buffer data, Reduction op, int servers);
void allreduce_ring(Communicator& comm, Buffer data, Reduction op);
void allreduce_recursive_doubling(Communicator& comm, Buffer data, Reduction op);
void allreduce_halving_doubling(Communicator& comm, Buffer data, Reduction op);
void allreduce_tree(Communicator& comm, Buffer data, Reduction op);
void allreduce_hierarchical(Communicator& comm, Buffer data, Reduction op, int ranks_per_node);
// Handles avg itself (fused into the reduction).
void allreduce_shared_memory(Communicator& comm, Buffer data, Reduction op);
void allreduce_native(Communicator& comm, Buffer data, Reduction op);

// Ring phases over a whole n-element buffer cut by block(): reduce-scatter
// leaves block r reduced on rank r; allgather spreads block r of rank r to all.
void ring_reduce_scatter_phase(Communicator& comm, Buffer data, Reduction op, uint32_t tag,
                               std::string_view collective);
void ring_allgather_phase(Communicator& comm, Buffer data, uint32_t tag,
                          std::string_view collective);

// reduce_scatter/ (data: n elements, used as scratch; output: block r)
void reduce_scatter_naive(Communicator& comm, Buffer data, Buffer output, Reduction op);
void reduce_scatter_ring(Communicator& comm, Buffer data, Buffer output, Reduction op);
// allgather/ (data: n elements with block r filled in)
void allgather_naive(Communicator& comm, Buffer data);
void allgather_ring(Communicator& comm, Buffer data);
// broadcast/
void broadcast_naive(Communicator& comm, Buffer data, int root);
void broadcast_tree(Communicator& comm, Buffer data, int root);
void broadcast_shared_memory(Communicator& comm, Buffer data, int root);
// reduce/
void reduce_naive(Communicator& comm, Buffer data, Reduction op, int root);
void reduce_tree(Communicator& comm, Buffer data, Reduction op, int root);
void reduce_shared_memory(Communicator& comm, Buffer data, Reduction op, int root);
// all_to_all/
void all_to_all_naive(Communicator& comm, const void* input, Buffer output);
void all_to_all_pairwise(Communicator& comm, const void* input, Buffer output);
// barrier/
void barrier_naive(Communicator& comm);
void barrier_dissemination(Communicator& comm);

}  // namespace px::comm::detail
