#include "plan/estimator.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "graph/op.h"
#include "graph/precision.h"
#include "plan/profile.h"

namespace px::plan {
namespace {

double achieved_memory_bandwidth(const DeviceSpec& device) {
  return device.memory_bandwidth * device.efficiency.memory_fraction;
}

// `all_to_all`: at the link's all-to-all bandwidth (LinkSpec::all_to_all_efficiency).
comm::CostModel link_model(const LinkSpec& link, const DeviceSpec& device, bool all_to_all = false) {
  comm::CostModel m;
  m.backend = link.name;
  m.transport = {.alpha = link.latency,
                 .beta = 1 / (all_to_all ? link.achieved_all_to_all_bandwidth() : link.achieved_bandwidth()),
                 .gamma = 1 / achieved_memory_bandwidth(device)};
  // Device memory, not a CPU's last-level cache: every byte costs β.
  m.cache_bytes = std::numeric_limits<double>::infinity();
  return m;
}

}  // namespace

double CostEstimator::codec_seconds(comm::compression::Method method, double elements, int ranks) const {
  using comm::compression::Method;
  if (method == Method::fp16 || method == Method::bf16) return memory_seconds(3 * 4 * elements);
  return memory_seconds(3 * 4 * elements) + memory_seconds(ranks * 2 * 4 * elements);
}

GemmTiles gemm_tiles(const Graph& graph, const Node& node) {
  if (node.def->bf16_gemm) {
    // linear, matmul, matmul_at_b: the output is the M x N the tiles cover.
    const Shape& out = graph.spec(node.outputs.front()).shape;
    const double n = static_cast<double>(out[-1]);
    return {.m = static_cast<double>(out.numel()) / n, .n = n, .batch = 1};
  }
  const std::string_view op = node.op();
  if (op == "attention" || op == "attention_grad") {
    // qkv (B, T, 3, H, D): per (batch, head) the T x T scores and the T x D
    // values, batched GEMMs whose largest output is the T x T one.
    const Shape& qkv = graph.spec(node.inputs.front()).shape;
    return {.m = static_cast<double>(qkv[1]), .n = static_cast<double>(qkv[1]),
            .batch = static_cast<double>(qkv[0] * qkv[3])};
  }
  return {};
}

double GemmTiles::quantisation(const GemmEfficiency& gemm) const {
  return m > 0 ? gemm_quantisation(gemm, m, n, batch) : 1;
}

RooflineEstimator::RooflineEstimator(ClusterSpec cluster)
    : cluster_(std::move(cluster)),
      intra_(link_model(cluster_.intra_node, cluster_.device)),
      inter_(link_model(cluster_.inter_node, cluster_.device)) {
  validate(cluster_);
}

const comm::CostModel& RooflineEstimator::cost_model(LinkClass link) const {
  return link == LinkClass::intra_node ? intra_ : inter_;
}

double RooflineEstimator::compute_seconds(const Graph& graph, const Node& node) const {
  return compute_seconds(graph, node, cluster_.device.efficiency.gemm);
}

double RooflineEstimator::compute_seconds_beside_collective(const Graph& graph, const Node& node) const {
  return compute_seconds(graph, node, beside_collective(cluster_.device.efficiency));
}

double RooflineEstimator::compute_seconds(const Graph& graph, const Node& node, const GemmEfficiency& gemm) const {
  const OpCost c = node_cost(graph, node);
  const DeviceSpec& device = cluster_.device;
  // At the rate of the dtype the node computes in (the lowering's stamp),
  // its bytes those of its tensors' dtypes (bf16 where the Program stores them so).
  const DType computes_in = precision_of(node.attrs) == Precision::bf16 ? DType::bf16 : DType::f32;
  const double bytes_seconds = (c.bytes_read + c.bytes_written) / achieved_memory_bandwidth(device);
  const double attention = measured_attention_seconds(graph, node, gemm, computes_in);
  if (attention > 0) return std::max({device.efficiency.launch_seconds, attention, bytes_seconds});
  const double flops_rate = device.flops(computes_in) * gemm.peak_fraction * gemm_tiles(graph, node).quantisation(gemm);
  return std::max({device.efficiency.launch_seconds, c.flops / flops_rate, bytes_seconds});
}

double RooflineEstimator::measured_attention_seconds(const Graph& graph, const Node& node, const GemmEfficiency& gemm,
                                                  DType computes_in) const {
  const DeviceSpec& device = cluster_.device;
  const std::string_view op = node.op();
  if (device.efficiency.attention.empty() || (op != "attention" && op != "attention_grad")) return 0;
  // The device's attention kernel (KernelEfficiency::attention_kernel) at
  // its measured rate. qkv (B, T, 3, H, D). The rates are 16-bit kernels'; an fp32
  // attention runs at the fp32 share of them. Beside a collective, at the
  // share of the units it leaves (the GEMM's peak fraction scaled alike).
  const Shape& qkv = graph.spec(node.inputs.front()).shape;
  const double T = static_cast<double>(qkv[1]), D = static_cast<double>(qkv[4]);
  const bool causal = node.attrs.get_int("causal", 1) != 0;
  const double measured = attention_rate(device.efficiency.attention, device.efficiency.attention_kernel, D, T, causal);
  if (measured <= 0) return 0;  // no point of this kernel and mask: costed as a GEMM
  const double rate = measured * device.flops(computes_in) / device.flops(DType::bf16) * gemm.peak_fraction /
                      device.efficiency.gemm.peak_fraction;
  const double forward = flash_attention_forward_flops(static_cast<double>(qkv[0] * qkv[3]), T, D, causal);
  return (op == "attention" ? forward : 2.5 * forward) / rate;
}

double RooflineEstimator::memory_seconds(double bytes) const {
  return std::max(cluster_.device.efficiency.launch_seconds, bytes / achieved_memory_bandwidth(cluster_.device));
}

double RooflineEstimator::collective_seconds(comm::Collective kind, double bytes, int ranks, LinkClass link,
                                             int ranks_per_node) const {
  if (ranks <= 1) return 0;
  comm::CostModel across = cost_model(link);
  if (kind == comm::Collective::allreduce && link == LinkClass::intra_node &&
      cluster_.intra_node.all_reduce_efficiency > 0) {
    // The switch reduces (NVLS): the measured busbw is the whole
    // collective's, with no reduction passes over the GPUs' memory.
    across.transport.beta = 1 / cluster_.intra_node.achieved_all_reduce_bandwidth();
    across.transport.gamma = 0;
  }
  if (link == LinkClass::inter_node && ranks_per_node > 1) {
    // NCCL runs a ring (channel) per NIC, each through every node's GPUs
    // of the group in turn, so a node's NICs carry a collective in
    // parallel and the rings' hops inside a node ride NVLink: the group
    // moves at min(ranks a node x one NIC's rate, the node's link).
    // Measured: all_reduce busbw 192 GB/s on DGX A100 nodes with 8 HDR
    // NICs of 25 GB/s each (NVIDIA/nccl issue #812); 365.84 GB/s on 4
    // HGX H100 hosts with 8 NDR NICs each (nccl-tests issue #309), the
    // NVLink 4 figure of 370 (nccl-tests issue #212). An all-to-all's
    // pairs cannot share NICs this way (each GPU sends through its own:
    // nccl-tests issue #267), nor does this apply to one rank a node.
    const double rails = std::min(static_cast<double>(ranks_per_node) * cluster_.inter_node.achieved_bandwidth(),
                                  cluster_.intra_node.achieved_bandwidth());
    across.transport.beta = 1 / std::max(rails, cluster_.inter_node.achieved_bandwidth());
  }
  double best = std::numeric_limits<double>::infinity();
  for (comm::Algorithm a : comm::algorithms_for(kind)) {
    // No MPI library's own collective and no shared host memory on a GPU cluster.
    if (a == comm::Algorithm::native || a == comm::Algorithm::shared_memory || a == comm::Algorithm::hierarchical)
      continue;
    const comm::CostModel model = kind == comm::Collective::all_to_all
                                      ? link_model(cluster_.link(link), cluster_.device, true)
                                      : across;
    best = std::min(best, comm::predicted_seconds(model, {.collective = kind, .algorithm = a, .bytes = bytes,
                                                          .ranks = ranks}));
  }
  return best;
}

double RooflineEstimator::transfer_seconds(double bytes, LinkClass link) const {
  const LinkSpec& l = cluster_.link(link);
  return l.latency + bytes / l.achieved_bandwidth();
}

ProfiledEstimator::ProfiledEstimator(ClusterSpec cluster, Options options)
    : cluster_(std::move(cluster)), options_(options) {
  validate(cluster_);
  if (!cluster_.profile) fail("cluster '{}' has no calibrated profile; run 'parallax calibrate'", cluster_.name);
  measured_ = cluster_.profile->comm;
  chooser_ = comm::default_cost_model("inproc");
  if (options_.link_gbps > 0) measured_.transport.beta = std::max(measured_.transport.beta, 8 / (options_.link_gbps * 1e9));
  between_hosts_ = measured_;
  between_hosts_.transport.alpha = cluster_.inter_node.latency;
  between_hosts_.transport.beta = 1 / cluster_.inter_node.achieved_bandwidth();
  between_hosts_.fits.clear();  // fitted inside a host
}

double ProfiledEstimator::compute_seconds(const Graph& graph, const Node& node) const {
  const HostProfile& profile = *cluster_.profile;
  const OpCost cost = node_cost(graph, node);
  const bool memory_bound = cost.flops / profile.flops < (cost.bytes_read + cost.bytes_written) / profile.memory_bandwidth;
  return kernel_seconds(profile, graph, node, options_.threads) * contention(profile, options_.ranks, memory_bound);
}

double ProfiledEstimator::memory_seconds(double bytes) const {
  const HostProfile& profile = *cluster_.profile;
  return profile.pass_seconds(bytes) * contention(profile, options_.ranks, true);
}

double ProfiledEstimator::update_seconds(double bytes) const {
  // The optimizer's state is touched once a step; the step's other data
  // pass through the cache in between, so its bytes come from memory even
  // when they would fit (the MLP's Adam pass took 1.1-4 ns an element in its
  // step, 0.2-0.35 ns warm alone).
  const HostProfile& profile = *cluster_.profile;
  return bytes / profile.memory_bandwidth * contention(profile, options_.ranks, true);
}

double ProfiledEstimator::codec_seconds(comm::compression::Method method, double elements, int ranks) const {
  const HostProfile& profile = *cluster_.profile;
  auto it = profile.codecs.find(std::string(comm::compression::method_name(method)));
  // A spec calibrated before codecs were timed: the passes.
  if (it == profile.codecs.end()) return CostEstimator::codec_seconds(method, elements, ranks);
  return elements * (it->second.encode + ranks * it->second.decode) * contention(profile, options_.ranks, false);
}

comm::CostQuery ProfiledEstimator::runtime_query(comm::Collective kind, double bytes, int ranks,
                                                 bool shared_memory) const {
  comm::CostQuery query{.collective = kind, .algorithm = options_.collective.algorithm, .bytes = bytes,
                        .ranks = ranks, .servers = options_.collective.servers,
                        .ranks_per_node = options_.collective.ranks_per_node};
  if (query.algorithm != comm::Algorithm::automatic) return query;
  double best = std::numeric_limits<double>::infinity();
  for (comm::Algorithm a : comm::algorithms_for(kind)) {
    if (a == comm::Algorithm::native || (!shared_memory && a == comm::Algorithm::shared_memory)) continue;
    comm::CostQuery candidate = query;
    candidate.algorithm = a;
    const double t = comm::predicted_seconds(chooser_, candidate);
    if (t < best) {
      best = t;
      query.algorithm = a;
    }
  }
  return query;
}

// `ranks_per_node` plays no part: this host's ranks share its one link to
// another host (the namespace hosts' veth), and across_hosts_seconds
// spreads the group over the spec's hosts itself.
double ProfiledEstimator::collective_seconds(comm::Collective kind, double bytes, int ranks, LinkClass link,
                                             int) const {
  if (ranks <= 1) return 0;
  if (link == LinkClass::inter_node && cluster_.nodes > 1) return across_hosts_seconds(kind, bytes, ranks);
  return comm::predicted_seconds(measured_, runtime_query(kind, bytes, ranks, options_.link_gbps <= 0));
}

double ProfiledEstimator::across_hosts_seconds(comm::Collective kind, double bytes, int ranks) const {
  const int hosts = std::min(ranks, cluster_.nodes);
  const int per_host = cluster_.ranks_per_node_of(ranks);
  const comm::CostQuery query = runtime_query(kind, bytes, ranks, false);
  if (query.algorithm != comm::Algorithm::hierarchical || kind != comm::Collective::allreduce)
    return comm::predicted_seconds(between_hosts_, query);
  // Reduce to each host's leader and broadcast back through the host's
  // shared memory; the leaders' ring crosses the link.
  double inside = 0;
  if (per_host > 1)
    for (comm::Collective step : {comm::Collective::reduce, comm::Collective::broadcast})
      inside += comm::predicted_seconds(measured_, {.collective = step, .algorithm = comm::Algorithm::shared_memory,
                                                    .bytes = bytes, .ranks = per_host});
  return inside + comm::predicted_seconds(between_hosts_, {.collective = comm::Collective::allreduce,
                                                           .algorithm = comm::Algorithm::ring,
                                                           .bytes = bytes, .ranks = hosts});
}

double ProfiledEstimator::transfer_seconds(double bytes, LinkClass link) const {
  const comm::CostModel& over = link == LinkClass::inter_node && cluster_.nodes > 1 ? between_hosts_ : measured_;
  return over.transport.alpha + bytes * over.transport.beta;
}

std::unique_ptr<CostEstimator> make_estimator(const ClusterSpec& cluster, const ProfiledEstimator::Options& local) {
  if (cluster.profile) return std::make_unique<ProfiledEstimator>(cluster, local);
  return std::make_unique<RooflineEstimator>(cluster);
}

double FakeEstimator::compute_seconds(const Graph&, const Node& node) const {
  auto it = per_op.find(std::string(node.op()));
  return it == per_op.end() ? per_node : it->second;
}

double FakeEstimator::collective_seconds(comm::Collective kind, double bytes, int ranks, LinkClass, int) const {
  if (ranks <= 1) return 0;
  const comm::CostTerms ring =
      comm::cost_terms({.collective = kind, .algorithm = comm::Algorithm::ring, .bytes = bytes, .ranks = ranks});
  return ring.messages * alpha + ring.bytes_sent * beta;
}

}  // namespace px::plan
