// Hierarchical allreduce: nodes are blocks of ranks_per_node consecutive
// ranks, or (0) the ranks sharing a host. Three steps:
//  1. reduce inside each node to its leader (node rank 0) — through shared
//     memory when the node's ranks share a host, else a binomial tree;
//  2. ring allreduce among the node leaders (the network path);
//  3. broadcast inside each node from its leader (shared memory or tree).
// With m ranks per node and L nodes, a leader sends 2(L-1)/L · n across
// nodes; inside a node every rank moves ~2n through the shared segment. One
// node reduces to a shared-memory allreduce; one rank per node to a ring.
#include "comm/algorithms.h"
#include "core/error.h"
#include "comm/reduction.h"

namespace px::comm::detail {
namespace {

// The three steps over `node` (this rank's node group) and `leaders` (the
// node leaders' group, on leaders only).
void run_steps(Communicator& comm, Buffer data, Reduction op, Communicator& node, Communicator* leaders,
               bool shared) {
  const Reduction in_node = op == Reduction::avg ? Reduction::sum : op;
  if (node.size() == comm.size()) {  // a single node
    if (shared) return allreduce_shared_memory(node, data, in_node);
    return allreduce_tree(node, data, op);
  }
  if (shared) reduce_shared_memory(node, data, in_node, 0);
  else reduce_tree(node, data, op, 0);
  if (leaders) allreduce_ring(*leaders, data, op);
  if (shared) broadcast_shared_memory(node, data, 0);
  else broadcast_tree(node, data, 0);
}

}  // namespace

void allreduce_hierarchical(Communicator& comm, Buffer data, Reduction op, int ranks_per_node) {
  if (comm.size() == 1 || data.count == 0) return;
  auto [node, leaders] = comm.node_groups(ranks_per_node);
  const bool shared = node->size() > 1 && node->shared_memory() != nullptr;
  // What the node and leader groups send is this group's collective's.
  const uint64_t before = node->bytes_sent() + (leaders ? leaders->bytes_sent() : 0);
  run_steps(comm, data, op, *node, leaders, shared);
  comm.count_sent(node->bytes_sent() + (leaders ? leaders->bytes_sent() : 0) - before);
}

}  // namespace px::comm::detail
