#include "plan/replay_calls.h"

#include "comm/engine/agreement.h"

namespace px::plan {
namespace {

// A compressed allreduce of n floats over p ranks (docs/compression.md's
// table): its time. fp16/bf16 ring-allreduce half-width values; int8,
// sign and the sparse methods allgather each rank's payload
// (comm::gathered_payload_bytes) and every rank decodes all p; PowerSGD
// ring-allreduces P (rows x r) and Q (cols x r) around two products with
// the gradient. The codec's own compute is the estimator's codec_seconds.
double compressed_allreduce_seconds(const CostEstimator& estimator, const CollectiveCall& call, int p,
                                    LinkClass link) {
  using comm::compression::Method;
  const double n = call.bytes / 4;
  switch (call.codec.method) {
    case Method::fp16:
    case Method::bf16:
      return estimator.collective_seconds(comm::Collective::allreduce, 2 * n, p, link) +
             estimator.codec_seconds(call.codec.method, n, p);
    case Method::powersgd: {
      const double r = call.codec.rank, small = 4 * r * (call.rows + call.cols);
      // Two (rows x cols) x r products and an orthogonalization, at the memory's pace.
      const double products = estimator.memory_seconds(2 * 4 * n) + estimator.memory_seconds(3 * small);
      return estimator.collective_seconds(comm::Collective::allreduce, 4 * r * call.rows, p, link) +
             estimator.collective_seconds(comm::Collective::allreduce, 4 * r * call.cols, p, link) + products;
    }
    case Method::none: return estimator.collective_seconds(comm::Collective::allreduce, call.bytes, p, link);
    default: {
      // Encode this rank's gradient, then decode and sum p payloads.
      const double payload = comm::gathered_payload_bytes(call.codec, n);
      return estimator.collective_seconds(comm::Collective::allgather, p * payload, p, link) +
             estimator.codec_seconds(call.codec.method, n, p);
    }
  }
}

}  // namespace

double slice_seconds(const CostEstimator& estimator, const CollectiveCall& call, int p, LinkClass link) {
  // Before each slice the engine's ranks announce their jobs to each other
  // (comm/engine/agreement.h): one small message to every peer at once.
  const double agreement =
      call.agreement ? estimator.transfer_seconds(static_cast<double>(sizeof(comm::Announcement)), link) : 0;
  if (call.codec.lossy()) return agreement + compressed_allreduce_seconds(estimator, call, p, link);
  return agreement + estimator.collective_seconds(call.kind, call.bytes / call.slices, p, link);
}

void count_wire(std::map<LinkClass, double>& sent, const comm::WireBytes& wire, LinkClass link, double weight) {
  if (link == LinkClass::intra_node || wire.inter_node > 0) {
    sent[LinkClass::intra_node] += weight * static_cast<double>(wire.intra_node);
    sent[LinkClass::inter_node] += weight * static_cast<double>(wire.inter_node);
  } else {
    sent[LinkClass::inter_node] += weight * static_cast<double>(wire.total());
  }
}

}  // namespace px::plan
