// What a prediction assumed for the step's largest pieces, so a user sees
// why it is what it is: the GEMM and the attention with the most FLOPs and
// the collective with the most bytes, each with the time the estimator gave
// it, the rate that time implies and the peak that rate is a fraction of
// (the device's datasheet FLOP/s at the node's precision; the link's line
// rate, against the collective's bus bandwidth as nccl-tests reports it:
// n·2(p−1)/p bytes for an allreduce, n·(p−1)/p for the others, over the time).
// The replay (plan/replay.cc) fills it from the very calls it times.
#pragma once

#include <optional>
#include <string>

#include "comm/collectives.h"
#include "graph/graph.h"
#include "plan/cluster.h"
#include "plan/estimator.h"

namespace px::plan {

struct AssumedPiece {
  std::string name;   // "h.0.mlp.c_fc (linear)", "allreduce over 8 ranks"
  std::string shape;  // "8192 x 3072 x 768", "128 MB on intra-node"
  double work = 0;    // FLOPs, or bus bytes
  double seconds = 0;
  double peak = 0;    // FLOP/s, or the link's bytes/s
  bool collective = false;
  double achieved() const { return seconds > 0 ? work / seconds : 0; }
  double fraction() const { return peak > 0 ? achieved() / peak : 0; }
};

struct Assumptions {
  std::optional<AssumedPiece> gemm, attention, collective;
};

// Keeps `node` (a compute of `flops` the estimator gave `seconds`) if it is
// a GEMM or an attention larger than the one held; `peak` is the device's
// FLOP/s at the node's precision.
void consider_compute(Assumptions& assumed, const Graph& graph, const Node& node, double flops, double seconds,
                      double peak);

// Keeps a collective of `bytes` (comm::CostQuery's n) over `ranks` on
// `link` if it moves more than the one held, timed by `estimator` only
// then (the replay calls this for every collective of the step).
void consider_collective(Assumptions& assumed, const CostEstimator& estimator, comm::Collective kind, double bytes,
                         int ranks, LinkClass link, int ranks_per_node, double link_bandwidth);

// One line per piece held, each starting with `indent`; "" when none.
std::string describe(const Assumptions& assumed, const std::string& indent = "  ");

}  // namespace px::plan
