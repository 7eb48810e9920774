// Collectives over a Communicator: allreduce, reduce-scatter, allgather,
// broadcast, reduce, all-to-all and barrier, each with a choice of algorithm
// (one file per algorithm under comm/<collective>/). Algorithm::automatic
// asks the communicator's cost model (cost_model.h) for the cheapest one.
//
// Every rank of the group calls the same collective with the same element
// count, dtype and options, in the same order. Results are identical on every
// rank (each output element is combined once, in rank order, or combined in
// the same order everywhere).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "comm/buffer.h"
#include "comm/communicator.h"
#include "comm/transport.h"
#include "core/error.h"

namespace px::comm {

enum class Collective { allreduce, reduce_scatter, allgather, broadcast, reduce, all_to_all, barrier };

enum class Algorithm {
  automatic,                 // cheapest by the cost model
  naive,                     // everyone sends everything to everyone
  parameter_server,          // one server rank reduces and sends back
  sharded_parameter_server,  // k server ranks, one shard each
  ring,                      // reduce-scatter + allgather around a ring
  recursive_doubling,        // log2 p full exchanges (latency-optimal)
  halving_doubling,          // Rabenseifner (bandwidth-optimal)
  tree,                      // binary / binomial tree, pipelined in segments
  hierarchical,              // within nodes by shared memory, ring across nodes
  shared_memory,             // every rank of the group on one host, via a shared segment
  pairwise,                  // all-to-all: p-1 rounds of paired exchanges
  dissemination,             // barrier: log2 p rounds
  native,                    // the MPI library's own collective
};

std::string_view collective_name(Collective collective);
Collective collective_from_name(std::string_view name);
std::string_view algorithm_name(Algorithm algorithm);
Algorithm algorithm_from_name(std::string_view name);
// The algorithms a collective implements (automatic excluded), whatever the
// transport; native and shared_memory also need backend support at run time.
std::span<const Algorithm> algorithms_for(Collective collective);
// Whether `algorithm` can run `collective` on this communicator now.
bool runnable(Communicator& comm, Collective collective, Algorithm algorithm);


struct CollectiveOptions {
  Algorithm algorithm = Algorithm::automatic;
  int servers = 0;         // sharded_parameter_server: shard count (0: one per rank)
  int ranks_per_node = 0;  // hierarchical: node size (0: ranks sharing a host)
  bool operator==(const CollectiveOptions&) const = default;
};

// The run's options as collective `collective` takes them: its algorithm
// where the collective implements it, else automatic (the communicator's
// choice). A run's `--allreduce ring` names its gradients' allreduces, not
// the all-to-all context parallelism also runs.
CollectiveOptions options_for(const CollectiveOptions& run, Collective collective);

// What Algorithm::automatic chooses among on one communicator, taken ahead
// of the run so a lowering can stamp the algorithm that will run (and its
// wire bytes): the transport's cost model, which backend-dependent
// algorithms it can run, and how many of its ranks share each host.
struct AlgorithmMenu {
  const CostModel* cost_model = nullptr;  // the communicator's (it must outlive the menu)
  int ranks = 1;
  bool shared_memory = false;  // every rank on one host, a shared segment mapped
  bool native = false;         // the MPI library's own collectives
  // Each rank's host (Communicator::hosts): which of its messages cross
  // between hosts (comm/wire_bytes.h). Empty: not known (one host).
  std::vector<int> hosts;
  bool node_shared_memory = true;  // a host's ranks share a segment (hierarchical's in-node steps)
};
// Collective over `comm` (the ranks exchange their host's rank count).
AlgorithmMenu algorithm_menu(Communicator& comm);
// The algorithm `options` run `collective` of `bytes` with over a group of
// `ranks` ranks of the menu's communicator (or a subgroup of it): the
// named one, or automatic's choice, as the collective itself would make it.
Algorithm choose_algorithm(const AlgorithmMenu& menu, Collective collective, double bytes, int ranks,
                           const CollectiveOptions& options);

// In place: data holds this rank's contribution and receives the result.
void allreduce(Communicator& comm, Buffer data, Reduction op = Reduction::sum,
               const CollectiveOptions& options = {});
// input: n elements; output: block(n, p, rank) of the reduced result.
void reduce_scatter(Communicator& comm, const void* input, Buffer output, int64_t n,
                    Reduction op = Reduction::sum, const CollectiveOptions& options = {});
// input: block(n, p, rank) elements; output: all n (output.count == n).
void allgather(Communicator& comm, const void* input, Buffer output,
               const CollectiveOptions& options = {});
// data on root is copied to every rank.
void broadcast(Communicator& comm, Buffer data, int root, const CollectiveOptions& options = {});
// In place; the result is valid on root only (others' data is scratch).
void reduce(Communicator& comm, Buffer data, Reduction op, int root,
            const CollectiveOptions& options = {});
// input and output: p blocks of output.count / p elements; block q of the
// input goes to rank q, arriving as block `rank` of q's output.
void all_to_all(Communicator& comm, const void* input, Buffer output,
                const CollectiveOptions& options = {});
// All-to-all with a byte count per peer (MPI_Alltoallv): input holds the
// bytes for rank 0, then rank 1, ...; output receives rank 0's, then rank
// 1's, .... Every rank must pass the counts its peers pass for it (agree
// on them first: a mismatch is a size error on the receive, or a wait
// that times out, never a silent hang). Pairwise, like all_to_all.
void all_to_all_v(Communicator& comm, const void* input, std::span<const int64_t> send_bytes, void* output,
                  std::span<const int64_t> receive_bytes);
void barrier(Communicator& comm, const CollectiveOptions& options = {});

// float32 conveniences.
inline void allreduce(Communicator& comm, std::span<float> data, Reduction op = Reduction::sum,
                      const CollectiveOptions& options = {}) {
  allreduce(comm, Buffer(data), op, options);
}
inline void broadcast(Communicator& comm, std::span<float> data, int root,
                      const CollectiveOptions& options = {}) {
  broadcast(comm, Buffer(data), root, options);
}

}  // namespace px::comm
