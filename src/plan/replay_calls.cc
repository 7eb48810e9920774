#include "plan/replay_calls.h"

#include <algorithm>

#include "comm/compression/recipe.h"
#include "comm/cost_model.h"
#include "comm/engine/agreement.h"

namespace px::plan {
namespace {

// A compressed allreduce over p ranks: its codec's collectives
// (comm/compression/recipe.h), and the codec's own compute, the
// estimator's codec_seconds; PowerSGD's instead two (rows x cols) x r
// products and an orthogonalization, at the memory's pace.
double compressed_allreduce_seconds(const CostEstimator& estimator, const CollectiveCall& call, int p,
                                    LinkClass link, int per_node) {
  using comm::compression::Method;
  const double n = call.bytes / 4;
  double seconds = 0;
  for (const comm::compression::CodecStep& step : comm::compression::codec_recipe(
           call.codec, n, static_cast<int64_t>(call.rows), static_cast<int64_t>(call.cols), p))
    seconds += estimator.collective_seconds(step.collective, step.bytes, p, link, per_node);
  if (call.codec.method == Method::powersgd) {
    const double small = 4 * call.codec.rank * (call.rows + call.cols);
    return seconds + estimator.memory_seconds(2 * 4 * n) + estimator.memory_seconds(3 * small);
  }
  return call.codec.method == Method::none ? seconds : seconds + estimator.codec_seconds(call.codec.method, n, p);
}

}  // namespace

double slice_seconds(const CostEstimator& estimator, const CollectiveCall& call, int p, LinkClass link, int per_node) {
  // In an agreement round the engine's ranks announce their jobs to each
  // other (comm/engine/agreement.h): one small message to every peer at once.
  const double rounds_per_slice = static_cast<double>(call.announcement_rounds) / call.slices;
  const double agreement =
      call.announcement_rounds > 0
          ? rounds_per_slice * estimator.transfer_seconds(static_cast<double>(sizeof(comm::Announcement)), link)
          : 0;
  if (call.codec.lossy()) return agreement + compressed_allreduce_seconds(estimator, call, p, link, per_node);
  return agreement + estimator.collective_seconds(call.kind, call.bytes / call.slices, p, link, per_node);
}

double throttle_wait(const DeviceSpec& device, int ranks) {
  if (device.quota.cores <= 0) return 0;
  const double share = std::min(1.0, device.quota.cores / std::max(1, ranks));
  return (1 - share) * (1 - share) * device.quota.period / 2;
}

double message_steps(comm::Collective kind, int p) {
  return comm::cost_terms({.collective = kind, .algorithm = comm::Algorithm::ring, .bytes = 1, .ranks = p}).messages;
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
