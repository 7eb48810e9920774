#include "comm/wire_bytes.h"

#include <algorithm>
#include <cmath>

#include "comm/cost_model.h"

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
  if (successor_only) return on_link(host_of(q, (q.rank + 1) % p) != host_of(q, q.rank), terms.bytes_sent);
  return on_link(spans_hosts(q), terms.bytes_sent);
}

WireBytes on_group_link(WireBytes w, double bytes, const WireQuery& q) {
  const WireBytes more = on_link(spans_hosts(q), bytes);
  return {.intra_node = w.intra_node + more.intra_node, .inter_node = w.inter_node + more.inter_node};
}

}  // namespace

double gathered_payload_bytes(const compression::Spec& codec, double floats) {
  using compression::Method;
  const double chunks = std::ceil(floats / 256);
  switch (codec.method) {
    case Method::int8: return floats + 4 * chunks;
    case Method::sign: return std::ceil(floats / 8) + 4 * chunks;
    case Method::topk:
    case Method::threshold: {
      const double fraction = codec.method == Method::topk ? codec.topk_fraction : 0.01;
      return 8 + 3.3 * std::round(fraction * floats);
    }
    default: return 0;
  }
}

WireBytes wire_bytes(const WireQuery& q) {
  using compression::Method;
  if (q.ranks <= 1) return {};
  const double n = static_cast<double>(q.bytes);
  if (!q.codec.lossy() || q.collective != Collective::allreduce) return dense_wire(q, q.collective, n);
  const double floats = n / 4;
  switch (q.codec.method) {
    case Method::fp16:
    case Method::bf16: return dense_wire(q, Collective::allreduce, 2 * floats);  // half-width values, ring-reduced
    case Method::powersgd: {
      // P (rows x r) and Q (cols x r) ring-allreduced.
      const double small = 4.0 * q.codec.rank * static_cast<double>(q.codec_rows + q.codec_cols);
      return dense_wire({.options = {.algorithm = Algorithm::ring, .ranks_per_node = q.options.ranks_per_node},
                         .ranks = q.ranks, .rank = q.rank, .hosts = q.hosts},
                        Collective::allreduce, small);
    }
    default:  // every rank's payload allgathered, each decoding all p
      return on_group_link({}, (q.ranks - 1) * gathered_payload_bytes(q.codec, floats), q);
  }
}

}  // namespace px::comm
