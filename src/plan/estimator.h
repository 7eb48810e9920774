// Cost estimators: what one device of a cluster takes for each piece of a
// step. The simulator (plan/simulate.h) asks only this interface, so the
// same replay runs on vendor figures (RooflineEstimator), on this host's
// calibrated profile, or on a table a test writes (FakeEstimator).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "comm/collectives.h"
#include "comm/compression/spec.h"
#include "comm/cost_model.h"
#include "graph/graph.h"
#include "plan/cluster.h"

namespace px::plan {

class CostEstimator {
 public:
  virtual ~CostEstimator() = default;
  // One node of a local graph (its shapes are the local ones).
  virtual double compute_seconds(const Graph& graph, const Node& node) const = 0;
  // The same node while a collective runs beside it on its device (the
  // collective's kernels hold some of its units; plan/efficiency.h). The
  // same by default: on this host the contention of cores is costed apart
  // (simulate_sharing_cores).
  virtual double compute_seconds_beside_collective(const Graph& graph, const Node& node) const {
    return compute_seconds(graph, node);
  }
  // A pass over `bytes` of memory (accumulating a gradient, the norm, the clip).
  virtual double memory_seconds(double bytes) const = 0;
  // The optimizer's update: a pass over the parameters, the gradient and the
  // state slots (`bytes` read and written).
  virtual double update_seconds(double bytes) const { return memory_seconds(bytes); }
  // A lossy codec's compute in a compressed allreduce of `elements` floats
  // over `ranks` ranks (not PowerSGD's, costed by its shapes): encoding
  // this rank's gradient, decoding and adding every rank's payload. Here a
  // few passes over the gradient (fp16/bf16: the narrowing, 3; the others:
  // 3 to encode, 2 per payload); the profiled estimator's are measured.
  virtual double codec_seconds(comm::compression::Method method, double elements, int ranks) const;
  // A collective of `bytes` (the whole buffer, as comm's CostQuery counts
  // it) over `ranks` ranks talking over `link`, `ranks_per_node` of them
  // on each node it spans (ClusterSpec::fewest_ranks_on_a_node; 1 when
  // every member is on a node of its own).
  virtual double collective_seconds(comm::Collective kind, double bytes, int ranks, LinkClass link,
                                    int ranks_per_node) const = 0;
  // One point-to-point message.
  virtual double transfer_seconds(double bytes, LinkClass link) const = 0;
};

// The output tiles a GEMM-like node computes: `batch` outputs of m x n
// (linear, matmul, matmul_at_b: the output; attention and its gradient:
// the T x T scores of every batch row and head). m = 0: not a GEMM.
struct GemmTiles {
  double m = 0, n = 0, batch = 1;
  // gemm_quantisation (plan/efficiency.h) of these tiles; 1 when not a GEMM.
  double quantisation(const GemmEfficiency& gemm) const;
};
GemmTiles gemm_tiles(const Graph& graph, const Node& node);

// From the ops' own cost functions (OpDef::cost: flops and bytes) and the
// cluster's figures at the efficiency its device and links reach
// (plan/efficiency.h; the presets' figures name their sources in
// plan/presets.cc): a node takes the largest of the launch floor,
// flops / (FLOP/s · GEMM peak fraction · its tiles' quantisation) and
// bytes / (memory bandwidth · memory fraction), at the FLOP/s of the dtype
// the node computes in (bf16 where the lowering stamped it: the strategy's
// precision) and with the bytes of its tensors' real dtypes; a collective takes what the runtime's α-β-γ cost model
// predicts for the algorithm it would choose (the cheapest), with α the
// link's latency, β its inverse achieved bandwidth and γ the device's
// inverse achieved memory bandwidth; a message latency + bytes / achieved
// bandwidth. With the identity efficiency this is the datasheet roofline.
class RooflineEstimator : public CostEstimator {
 public:
  explicit RooflineEstimator(ClusterSpec cluster);
  double compute_seconds(const Graph& graph, const Node& node) const override;
  double compute_seconds_beside_collective(const Graph& graph, const Node& node) const override;
  double memory_seconds(double bytes) const override;
  double collective_seconds(comm::Collective kind, double bytes, int ranks, LinkClass link,
                            int ranks_per_node) const override;
  double transfer_seconds(double bytes, LinkClass link) const override;
  // The link's cost model (what collective_seconds uses).
  const comm::CostModel& cost_model(LinkClass link) const;


 private:
  double compute_seconds(const Graph& graph, const Node& node, const GemmEfficiency& gemm) const;
  // An attention node at the device's measured attention rate
  // (KernelEfficiency::attention); 0 for other nodes or without rates.
  double measured_attention_seconds(const Graph& graph, const Node& node, const GemmEfficiency& gemm,
                                 DType computes_in) const;

  ClusterSpec cluster_;
  comm::CostModel intra_, inter_;
};

// This host, from `parallax calibrate`'s profile (cluster.profile, the
// `local` spec; plan/profile.h): a node takes its timed (or interpolated)
// seconds, a memory pass bytes / the streamed bandwidth (the optimizer's
// update past the caches, see update_seconds), each slowed by the
// contention of `ranks` in-process ranks computing at once on the host's
// cores. No model-level correction: calibration times kernels and the
// transport, never the models it predicts. A collective takes the measured α-β-γ model's time for the
// algorithm the runtime would run: `collective.algorithm`, or with
// automatic the one the communicator's built-in model picks (what
// Algorithm::automatic does in a run). With a link limit (--link-gbps) every
// byte sent costs at least 8 / (Gb/s · 1e9) seconds and no shared memory is
// used, as the limited in-process transport does. On a spec of several
// hosts (calibrated under mpirun) a group that spans hosts pays the link
// between them (the spec's inter_node): a ring at the pace of its slowest
// hop, a hierarchical allreduce its in-host reduce and broadcast on the
// host's shared memory and its leaders' ring on that link.
class ProfiledEstimator : public CostEstimator {
 public:
  struct Options {
    double ranks = 1;            // in-process ranks computing at once (on average)
    int threads = 1;             // kernel threads a rank
    double link_gbps = 0;        // 0: unlimited
    comm::CollectiveOptions collective;
  };
  ProfiledEstimator(ClusterSpec cluster, Options options);
  double compute_seconds(const Graph& graph, const Node& node) const override;
  double memory_seconds(double bytes) const override;
  double update_seconds(double bytes) const override;
  double codec_seconds(comm::compression::Method method, double elements, int ranks) const override;
  double collective_seconds(comm::Collective kind, double bytes, int ranks, LinkClass link,
                            int ranks_per_node) const override;
  double transfer_seconds(double bytes, LinkClass link) const override;

 private:
  // The collective as the runtime runs it: `collective.algorithm`, or with
  // automatic the one its built-in model picks (shared memory only where
  // the group may use it).
  comm::CostQuery runtime_query(comm::Collective kind, double bytes, int ranks, bool shared_memory) const;
  // A collective over `ranks` ranks spread over the spec's hosts.
  double across_hosts_seconds(comm::Collective kind, double bytes, int ranks) const;

  ClusterSpec cluster_;
  Options options_;
  comm::CostModel measured_;  // the profile's, with the link limit
  comm::CostModel between_hosts_;  // measured_ with the spec's inter_node link as its transport
  comm::CostModel chooser_;   // what the runtime's communicator picks algorithms by
};

// The estimator a cluster calls for: its profile's when calibrated, else its roofline.
std::unique_ptr<CostEstimator> make_estimator(const ClusterSpec& cluster,
                                              const ProfiledEstimator::Options& local = {});

// A table for tests: each node costs its op's entry (or `per_node`),
// memory passes `per_byte` a byte, a message α + bytes · β, a collective
// messages · α + bytes_sent · β with the ring's terms (comm::cost_terms:
// allreduce 2(p−1) messages and 2(p−1)/p · n bytes, reduce-scatter and
// allgather (p−1) and (p−1)/p · n).
struct FakeEstimator : CostEstimator {
  std::map<std::string, double> per_op;  // op name -> seconds
  double per_node = 0;
  double per_byte = 0;
  double alpha = 0, beta = 0;
  double compute_seconds(const Graph& graph, const Node& node) const override;
  double memory_seconds(double bytes) const override { return bytes * per_byte; }
  double collective_seconds(comm::Collective kind, double bytes, int ranks, LinkClass link,
                            int ranks_per_node) const override;
  double transfer_seconds(double bytes, LinkClass) const override { return alpha + bytes * beta; }
};

}  // namespace px::plan
