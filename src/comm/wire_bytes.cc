#include "comm/wire_bytes.h"

#include <cmath>

#include "comm/cost_model.h"

namespace px::comm {
namespace {

// What one rank sends for a dense collective of n bytes, split by link.
WireBytes dense_wire(const WireQuery& q, Collective collective, double n) {
  const int p = q.ranks;
  if (p <= 1) return {};
  Algorithm algorithm = q.options.algorithm == Algorithm::automatic ? Algorithm::ring : q.options.algorithm;
  // Copies through a shared segment are no transport's.
  if (algorithm == Algorithm::shared_memory) return {};
  const int m = q.options.ranks_per_node;
  const bool spans_nodes = m > 0 && m < p;
  if (algorithm == Algorithm::hierarchical && collective == Collective::allreduce) {
    // Reduce to and broadcast from the node leader (a shared segment, or a
    // tree of the node's ranks), the leaders' ring between nodes.
    const int node_size = spans_nodes ? std::min(m, p - (q.rank / m) * m) : p;
    const double in_node =
        q.node_shared_memory || node_size == 1
            ? 0
            : cost_terms({.collective = Collective::allreduce, .algorithm = Algorithm::tree, .bytes = n,
                          .ranks = node_size})
                  .bytes_sent;
    if (!spans_nodes) return {.intra_node = std::llround(in_node)};
    const double nodes = std::ceil(static_cast<double>(p) / m);
    const bool leader = q.rank % m == 0;
    return {.intra_node = std::llround(in_node), .inter_node = leader ? std::llround(2 * (nodes - 1) / nodes * n) : 0};
  }
  const CostTerms terms = cost_terms({.collective = collective, .algorithm = algorithm, .bytes = n, .ranks = p,
                                      .servers = q.options.servers, .ranks_per_node = q.options.ranks_per_node});
  if (!spans_nodes) return {.intra_node = std::llround(terms.bytes_sent)};
  return {.inter_node = std::llround(terms.bytes_sent)};
}

WireBytes on_group_link(WireBytes w, double bytes, const WireQuery& q) {
  const bool spans_nodes = q.options.ranks_per_node > 0 && q.options.ranks_per_node < q.ranks;
  (spans_nodes ? w.inter_node : w.intra_node) += std::llround(bytes);
  return w;
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
                    .ranks = q.ranks},
                   Collective::allreduce, small);
    }
    default:  // every rank's payload allgathered, each decoding all p
      return on_group_link({}, (q.ranks - 1) * gathered_payload_bytes(q.codec, floats), q);
  }
}

}  // namespace px::comm
