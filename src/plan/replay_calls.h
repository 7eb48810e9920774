// The replay's communicating instructions (internal to plan/): what one
// collective or reshard is for the simulator, and its time and bytes.
#pragma once

#include <map>

#include "comm/collectives.h"
#include "comm/compression/spec.h"
#include "comm/wire_bytes.h"
#include "parallel/program.h"
#include "plan/cluster.h"
#include "plan/estimator.h"

namespace px::plan {

// One communicating instruction: the lowering's facts (its group, sequence
// number and wire bytes, parallel/program.h) and the collective's n for the
// estimator's time.
struct CollectiveCall {
  const parallel::CommGroup* group = nullptr;
  comm::Collective kind = comm::Collective::allreduce;
  comm::compression::Spec codec;  // a compressed allreduce (docs/compression.md)
  double rows = 1, cols = 1;      // its gradient as a matrix (PowerSGD)
  double bytes = 0;  // the collective's n, as comm::CostQuery counts it
  comm::WireBytes wire;  // what this rank sends
  int64_t sequence = 0;
  bool engine = false;  // on its axis' progress lane
  int axis = 0;
  int priority = 0;  // the progress lane runs the most urgent first
  // On the progress lane, the engine's slices (comm::slice_plan): each one
  // a collective of its share of the bytes; and the engine's agreement
  // rounds the replay costs (the stamped Instr::announcement_rounds, or 0
  // where it leaves them out), spread evenly over the slices.
  int slices = 1;
  int announcement_rounds = 0;
};

// The time of one of `call`'s slices over a group of p ranks on `link`,
// `per_node` of them on each node it spans: its share of the agreement
// rounds (call.announcement_rounds) and the collective (a compressed
// allreduce by its codec's recipe).
double slice_seconds(const CostEstimator& estimator, const CollectiveCall& call, int p, LinkClass link, int per_node);

// The expected wait of one message step at a node under a CPU quota
// (`device.quota`, shared by its `ranks` ranks of one thread each), 0
// without one. A busy node (computing beside the collective, or just
// done) runs share = min(1, cores / ranks) of each period and is
// throttled for the rest; a message arriving at a uniformly random time
// finds it throttled with probability (1 - share) and then waits half the
// throttled part on average: (1 - share)^2 * period / 2. At 12.5% of a
// core with 10 ms periods, 3.8 ms a step: the hosts' ring steps wait
// that long for a quota host (docs/heterogeneous.md, the prediction).
double throttle_wait(const DeviceSpec& device, int ranks);

// Latency-bound message steps of a collective of `kind` over p ranks (the
// ring's), each of which waits for every member.
double message_steps(comm::Collective kind, int p);

// Adds `weight` times `wire` to the bytes by link class: the stamped split,
// or, when the lowering knew no node layout (all counted within a node),
// the link the cluster gives the group.
void count_wire(std::map<LinkClass, double>& sent, const comm::WireBytes& wire, LinkClass link, double weight);

}  // namespace px::plan
