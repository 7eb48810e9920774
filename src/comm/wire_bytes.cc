#include "comm/wire_bytes.h"

#include <algorithm>
#include <cmath>

#include "comm/compression/recipe.h"
#include "comm/cost_model.h"
#include "core/block.h"

namespace px::comm {
namespace {

// Group rank i's host: the run's, else the block of ranks_per_node it is in.
int host_of(const WireQuery& q, int i) {
  if (!q.hosts.empty()) return q.hosts[static_cast<size_t>(i)];
  return q.options.ranks_per_node > 0 ? i / q.options.ranks_per_node : 0;
}

bool spans_hosts(const WireQuery& q) {
  for (int i = 1; i < q.ranks; ++i)
    if (host_of(q, i) != host_of(q, 0)) return true;
  return false;
}

WireBytes on_link(bool between_hosts, double bytes) {
  return between_hosts ? WireBytes{.inter_node = std::llround(bytes)} : WireBytes{.intra_node = std::llround(bytes)};
}

// Hierarchical: reduce to and broadcast from the node leader (a shared
// segment, or a tree of the node's ranks), the leaders' ring between
// nodes. Nodes are blocks of ranks_per_node, or (0) the hosts.
WireBytes hierarchical_wire(const WireQuery& q, double n) {
  const int m = q.options.ranks_per_node;
  auto node_of = [&](int i) { return m > 0 ? i / m : host_of(q, i); };
  std::vector<int> leaders;  // each node's first rank, in rank order
  std::vector<int> seen;
  int node_size = 0;
  for (int i = 0; i < q.ranks; ++i) {
    if (node_of(i) == node_of(q.rank)) ++node_size;
    if (std::find(seen.begin(), seen.end(), node_of(i)) != seen.end()) continue;
    seen.push_back(node_of(i));
    leaders.push_back(i);
  }
  const double in_node = q.node_shared_memory || node_size == 1
                             ? 0
                             : cost_terms({.collective = Collective::allreduce, .algorithm = Algorithm::tree,
                                           .bytes = n, .ranks = node_size})
                                   .bytes_sent;
  WireBytes w{.intra_node = std::llround(in_node)};
  const auto me = std::find(leaders.begin(), leaders.end(), q.rank);
  const double nodes = static_cast<double>(leaders.size());
  if (me == leaders.end() || leaders.size() == 1) return w;
  const int next = leaders[static_cast<size_t>(me - leaders.begin() + 1) % leaders.size()];
  const WireBytes ring = on_link(host_of(q, next) != host_of(q, q.rank), 2 * (nodes - 1) / nodes * n);
  return {.intra_node = w.intra_node + ring.intra_node, .inter_node = ring.inter_node};
}

// What one rank sends for a dense collective of n bytes, split by link.
WireBytes dense_wire(const WireQuery& q, Collective collective, double n) {
  const int p = q.ranks;
  if (p <= 1) return {};
  Algorithm algorithm = q.options.algorithm == Algorithm::automatic ? Algorithm::ring : q.options.algorithm;
  // Copies through a shared segment are no transport's.
  if (algorithm == Algorithm::shared_memory) return {};
  if (algorithm == Algorithm::hierarchical && collective == Collective::allreduce) return hierarchical_wire(q, n);
  const CostTerms terms = cost_terms({.collective = collective, .algorithm = algorithm, .bytes = n, .ranks = p,
                                      .servers = q.options.servers, .ranks_per_node = q.options.ranks_per_node});
  const bool successor_only = algorithm == Algorithm::ring &&
                              (collective == Collective::allreduce || collective == Collective::allgather ||
                               collective == Collective::reduce_scatter);
  if (successor_only) {
    double bytes = terms.bytes_sent;
    if (q.element_bytes > 0) {
      const int64_t count = std::llround(n / q.element_bytes);
      auto elements = [&](int i) { return static_cast<double>(block(count, p, i % p).count); };
      const double all = static_cast<double>(count);
      const double sent = collective == Collective::reduce_scatter ? all - elements(q.rank)
                          : collective == Collective::allgather    ? all - elements(q.rank + 1)
                                                                   : 2 * all - elements(q.rank) - elements(q.rank + 1);
      bytes = sent * q.element_bytes;
    }
    return on_link(host_of(q, (q.rank + 1) % p) != host_of(q, q.rank), bytes);
  }
  return on_link(spans_hosts(q), terms.bytes_sent);
}

WireBytes on_group_link(WireBytes w, double bytes, const WireQuery& q) {
  const WireBytes more = on_link(spans_hosts(q), bytes);
  return {.intra_node = w.intra_node + more.intra_node, .inter_node = w.inter_node + more.inter_node};
}

}  // namespace

WireBytes wire_bytes(const WireQuery& q) {
  if (q.ranks <= 1) return {};
  const double n = static_cast<double>(q.bytes);
  if (!q.codec.lossy() || q.collective != Collective::allreduce) return dense_wire(q, q.collective, n);
  WireBytes w;
  for (const compression::CodecStep& step :
       compression::codec_recipe(q.codec, n / 4, q.codec_rows, q.codec_cols, q.ranks)) {
    WireQuery payload = q;  // a step's payload is no float32 buffer: (p-1)/p of it each way
    payload.element_bytes = 0;
    WireQuery ring = payload;
    ring.options = {.algorithm = Algorithm::ring, .ranks_per_node = q.options.ranks_per_node};
    const WireBytes more = step.gathered ? on_group_link({}, (q.ranks - 1) * step.bytes / q.ranks, q)
                                         : dense_wire(step.ring ? ring : payload, step.collective, step.bytes);
    w = {.intra_node = w.intra_node + more.intra_node, .inter_node = w.inter_node + more.inter_node};
  }
  return w;
}

}  // namespace px::comm
