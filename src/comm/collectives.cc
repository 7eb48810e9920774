// Dispatch: checks arguments, resolves Algorithm::automatic with the cost
// model, runs the algorithm, and applies avg's 1/p where the algorithm did not.
#include "comm/collectives.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "comm/algorithms.h"
#include "comm/cost_model.h"
#include "comm/reduction.h"
#include "core/error.h"

namespace px::comm {
namespace {

using A = Algorithm;
constexpr std::array kAllreduce{A::naive,           A::parameter_server,
                                A::sharded_parameter_server, A::ring,
                                A::recursive_doubling, A::halving_doubling,
                                A::tree,            A::hierarchical,
                                A::shared_memory,   A::native};
constexpr std::array kReduceScatter{A::naive, A::ring};
constexpr std::array kAllgather{A::naive, A::ring};
constexpr std::array kBroadcast{A::naive, A::tree, A::shared_memory};
constexpr std::array kReduce{A::naive, A::tree, A::shared_memory};
constexpr std::array kAllToAll{A::naive, A::pairwise};
constexpr std::array kBarrier{A::naive, A::dissemination};

constexpr std::array kCollectiveNames{"allreduce", "reduce_scatter", "allgather", "broadcast",
                                      "reduce",    "all_to_all",     "barrier"};
constexpr std::array kAlgorithmNames{
    "auto",           "naive", "parameter_server", "sharded_parameter_server", "ring",
    "recursive_doubling", "halving_doubling", "tree", "hierarchical", "shared_memory",
    "pairwise",       "dissemination", "native"};

// The menu a call needs (no host exchange: the choice does not use it).
AlgorithmMenu menu_of(Communicator& comm, Collective collective, const CollectiveOptions& options) {
  AlgorithmMenu menu{.cost_model = &comm.cost_model(), .ranks = comm.size()};
  if (options.algorithm == A::automatic) {
    menu.shared_memory = runnable(comm, collective, A::shared_memory);
    menu.native = runnable(comm, collective, A::native);
  }
  return menu;
}

Algorithm choose(Communicator& comm, Collective collective, double bytes, const CollectiveOptions& options) {
  return choose_algorithm(menu_of(comm, collective, options), collective, bytes, comm.size(), options);
}

void check_root(Communicator& comm, int root, std::string_view collective) {
  if (root < 0 || root >= comm.size())
    fail("{}: root {} is out of range; expected 0..{}", collective, root, comm.size() - 1);
}

void finish_avg(Communicator& comm, Buffer data, Reduction op) {
  if (op == Reduction::avg) scale(data.data, data.count, data.dtype, 1.0f / comm.size());
}

}  // namespace

std::string_view collective_name(Collective collective) {
  return kCollectiveNames[static_cast<int>(collective)];
}
Collective collective_from_name(std::string_view name) {
  for (size_t i = 0; i < kCollectiveNames.size(); ++i)
    if (name == kCollectiveNames[i]) return static_cast<Collective>(i);
  fail("unknown collective '{}'; expected one of {}", name, fmt::join(kCollectiveNames, ", "));
}
std::string_view algorithm_name(Algorithm algorithm) {
  return kAlgorithmNames[static_cast<int>(algorithm)];
}
Algorithm algorithm_from_name(std::string_view name) {
  for (size_t i = 0; i < kAlgorithmNames.size(); ++i)
    if (name == kAlgorithmNames[i]) return static_cast<Algorithm>(i);
  fail("unknown algorithm '{}'; expected one of {}", name, fmt::join(kAlgorithmNames, ", "));
}

std::span<const Algorithm> algorithms_for(Collective collective) {
  switch (collective) {
    case Collective::allreduce: return kAllreduce;
    case Collective::reduce_scatter: return kReduceScatter;
    case Collective::allgather: return kAllgather;
    case Collective::broadcast: return kBroadcast;
    case Collective::reduce: return kReduce;
    case Collective::all_to_all: return kAllToAll;
    case Collective::barrier: return kBarrier;
  }
  return {};
}

CollectiveOptions options_for(const CollectiveOptions& run, Collective collective) {
  CollectiveOptions options = run;
  auto allowed = algorithms_for(collective);
  if (std::find(allowed.begin(), allowed.end(), run.algorithm) == allowed.end()) options.algorithm = A::automatic;
  return options;
}

Algorithm choose_algorithm(const AlgorithmMenu& menu, Collective collective, double bytes, int ranks,
                           const CollectiveOptions& options) {
  if (options.algorithm != A::automatic) {
    auto allowed = algorithms_for(collective);
    if (std::find(allowed.begin(), allowed.end(), options.algorithm) == allowed.end())
      fail("{}: algorithm '{}' does not implement this collective", collective_name(collective),
           algorithm_name(options.algorithm));
    return options.algorithm;
  }
  PX_CHECK(menu.cost_model != nullptr, "choose_algorithm: a menu without a cost model");
  Algorithm best = algorithms_for(collective)[0];
  double best_time = std::numeric_limits<double>::infinity();
  for (Algorithm candidate : algorithms_for(collective)) {
    if (candidate == A::native || (candidate == A::shared_memory && !menu.shared_memory && ranks > 1)) continue;
    const double time = predicted_seconds(
        *menu.cost_model, CostQuery{collective, candidate, bytes, ranks, options.servers, options.ranks_per_node});
    if (time < best_time) {
      best_time = time;
      best = candidate;
    }
  }
  return best;
}

AlgorithmMenu algorithm_menu(Communicator& comm) {
  AlgorithmMenu menu = menu_of(comm, Collective::allreduce, {});
  if (comm.size() == 1) return menu;
  // Hosts by the hierarchical algorithm's own rule (ranks_per_node 0).
  menu.hosts = comm.hosts();
  Communicator& node = *comm.node_groups(0).first;
  menu.node_shared_memory = node.size() == 1 || node.shared_memory() != nullptr;
  return menu;
}

bool runnable(Communicator& comm, Collective collective, Algorithm algorithm) {
  auto allowed = algorithms_for(collective);
  if (std::find(allowed.begin(), allowed.end(), algorithm) == allowed.end()) return false;
  if (algorithm == A::native) return comm.transport().native() != nullptr;
  if (algorithm == A::shared_memory) return comm.size() == 1 || comm.shared_memory() != nullptr;
  return true;
}

void allreduce(Communicator& comm, Buffer data, Reduction op, const CollectiveOptions& options) {
  check_reducible(data.dtype, "allreduce");
  const Algorithm algorithm = choose(comm, Collective::allreduce, data.bytes(), options);
  switch (algorithm) {
    case A::naive: detail::allreduce_naive(comm, data, op); break;
    case A::parameter_server: detail::allreduce_parameter_server(comm, data, op, 1); break;
    case A::sharded_parameter_server:
      detail::allreduce_parameter_server(comm, data, op,
                                         options.servers > 0 ? options.servers : comm.size());
      break;
    case A::ring: detail::allreduce_ring(comm, data, op); break;
    case A::recursive_doubling: detail::allreduce_recursive_doubling(comm, data, op); break;
    case A::halving_doubling: detail::allreduce_halving_doubling(comm, data, op); break;
    case A::tree: detail::allreduce_tree(comm, data, op); break;
    case A::hierarchical:
      detail::allreduce_hierarchical(comm, data, op, options.ranks_per_node);
      break;
    case A::shared_memory: return detail::allreduce_shared_memory(comm, data, op);
    case A::native: detail::allreduce_native(comm, data, op); break;
    default: PX_CHECK(false, "unhandled allreduce algorithm {}", algorithm_name(algorithm));
  }
  finish_avg(comm, data, op);
}

void reduce_scatter(Communicator& comm, const void* input, Buffer output, int64_t n,
                    Reduction op, const CollectiveOptions& options) {
  check_reducible(output.dtype, "reduce_scatter");
  const Block mine = block(n, comm.size(), comm.rank());
  if (output.count != mine.count)
    fail("reduce_scatter: output holds {} elements on rank {}; expected block {} of {} elements "
         "over {} ranks = {}",
         output.count, comm.rank(), comm.rank(), n, comm.size(), mine.count);
  // The algorithms work in place on a copy of the input.
  Buffer work(comm.scratch(n * output.element_size(), 3), n, output.dtype);
  copy_bytes(work.data, input, work.bytes());
  const Algorithm algorithm = choose(comm, Collective::reduce_scatter, work.bytes(), options);
  if (algorithm == A::naive) detail::reduce_scatter_naive(comm, work, output, op);
  else detail::reduce_scatter_ring(comm, work, output, op);
  finish_avg(comm, output, op);
}

void allgather(Communicator& comm, const void* input, Buffer output,
               const CollectiveOptions& options) {
  const Block mine = block(output.count, comm.size(), comm.rank());
  if (mine.count > 0) std::memmove(output.at(mine.begin), input, mine.count * output.element_size());
  const Algorithm algorithm = choose(comm, Collective::allgather, output.bytes(), options);
  if (algorithm == A::naive) detail::allgather_naive(comm, output);
  else detail::allgather_ring(comm, output);
}

void broadcast(Communicator& comm, Buffer data, int root, const CollectiveOptions& options) {
  check_root(comm, root, "broadcast");
  switch (choose(comm, Collective::broadcast, data.bytes(), options)) {
    case A::naive: return detail::broadcast_naive(comm, data, root);
    case A::shared_memory: return detail::broadcast_shared_memory(comm, data, root);
    default: return detail::broadcast_tree(comm, data, root);
  }
}

void reduce(Communicator& comm, Buffer data, Reduction op, int root,
            const CollectiveOptions& options) {
  check_reducible(data.dtype, "reduce");
  check_root(comm, root, "reduce");
  switch (choose(comm, Collective::reduce, data.bytes(), options)) {
    case A::naive: detail::reduce_naive(comm, data, op, root); break;
    case A::shared_memory: return detail::reduce_shared_memory(comm, data, op, root);
    default: detail::reduce_tree(comm, data, op, root); break;
  }
  if (comm.rank() == root) finish_avg(comm, data, op);
}

void all_to_all(Communicator& comm, const void* input, Buffer output,
                const CollectiveOptions& options) {
  if (output.count % comm.size() != 0)
    fail("all_to_all: {} elements cannot be cut into {} equal blocks; expected a multiple of {}",
         output.count, comm.size(), comm.size());
  if (choose(comm, Collective::all_to_all, output.bytes(), options) == A::naive)
    detail::all_to_all_naive(comm, input, output);
  else
    detail::all_to_all_pairwise(comm, input, output);
}

void barrier(Communicator& comm, const CollectiveOptions& options) {
  if (choose(comm, Collective::barrier, 0, options) == A::naive) detail::barrier_naive(comm);
  else detail::barrier_dissemination(comm);
}

}  // namespace px::comm
