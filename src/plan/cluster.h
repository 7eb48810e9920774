// ClusterSpec: the machines a strategy is planned for, as a plain value
// (JSON round trip; docs/planner.md lists the fields and the presets'
// sources). Nodes of identical devices, or each node its own (a
// heterogeneous cluster); links inside a node (NVLink and NVSwitch on the
// presets) and between nodes (the network), each with a bandwidth per
// device and a latency.
//
// Ranks map to devices in order: rank r is device r % devices_per_node of
// node r / devices_per_node, so a mesh's innermost axes (tensor
// parallelism) stay inside a node.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/dtype.h"
#include "plan/efficiency.h"
#include "plan/profile.h"

namespace px::plan {

// A CPU quota on a node (a cgroup's, scripts/hosts.sh --cpu): its ranks
// may run `cores` cores' worth of each `period` seconds, then wait for the
// next period. Its average pace is in the node's device rate; the waits
// are what a message to a throttled node meets (Replay: throttle_wait).
struct CpuQuota {
  double cores = 0;   // 0: no quota
  double period = 0;  // s
  bool operator==(const CpuQuota&) const = default;
};

struct DeviceSpec {
  std::string name;
  double flops_f32 = 0;   // dense FLOP/s
  double flops_bf16 = 0;  // dense FLOP/s (0: no bf16 units; f32 is used)
  double memory_bytes = 0;
  double memory_bandwidth = 0;  // bytes/s
  // How close its kernels come to the figures above (plan/efficiency.h);
  // the default is the datasheet roofline.
  KernelEfficiency efficiency;
  CpuQuota quota;  // a CPU node's cgroup quota (none on presets)
  double flops(DType dtype) const { return dtype == DType::f32 || flops_bf16 <= 0 ? flops_f32 : flops_bf16; }
  bool operator==(const DeviceSpec&) const = default;
};

struct LinkSpec {
  std::string name;
  double bandwidth = 0;  // bytes/s one device can send at once, each way
  double latency = 0;    // s per message
  // Achieved bus bandwidth over `bandwidth` (nccl-tests' busbw over the
  // line rate): every byte costs 1 / (bandwidth · efficiency).
  double efficiency = 1;
  // The same for an all-to-all (expert parallelism's routed exchanges),
  // which the library runs as point-to-point pairs, not rings: nccl-tests'
  // alltoall busbw over the line rate (0: `efficiency`).
  double all_to_all_efficiency = 0;
  // The same for an allreduce, where the switch can do the reduction
  // (NVLink SHARP, "NVLS", on H100's NVSwitch): nccl-tests' all_reduce
  // busbw over the line rate, which then exceeds 1 (0: `efficiency`).
  double all_reduce_efficiency = 0;
  double achieved_bandwidth() const { return bandwidth * efficiency; }
  double achieved_all_reduce_bandwidth() const {
    return bandwidth * (all_reduce_efficiency > 0 ? all_reduce_efficiency : efficiency);
  }
  double achieved_all_to_all_bandwidth() const {
    return bandwidth * (all_to_all_efficiency > 0 ? all_to_all_efficiency : efficiency);
  }
  bool operator==(const LinkSpec&) const = default;
};

enum class LinkClass { intra_node, inter_node };
std::string_view link_class_name(LinkClass link);

struct ClusterSpec {
  std::string name;
  int nodes = 1;
  int devices_per_node = 1;
  DeviceSpec device;  // every node's, unless node_devices gives each its own
  // Nodes of their own speed and memory (mixed generations, hosts under CPU
  // quotas, `parallax calibrate` across hosts): empty, every node's devices
  // are `device`; else one spec per node. `device` stays the reference the
  // profile's kernel times were measured against.
  std::vector<DeviceSpec> node_devices;
  LinkSpec intra_node;  // between devices of one node
  LinkSpec inter_node;  // between nodes
  std::string host;     // the host CPU, for people
  // The devices of a node share its memory (in-process ranks on one host):
  // device.memory_bytes is the node's, for all its ranks together.
  bool devices_share_memory = false;
  // The nodes are network namespaces of one machine (scripts/hosts.sh):
  // every node's ranks compute on the same cores, so they all contend.
  bool nodes_share_cores = false;
  // What `parallax calibrate` measured (the `local` spec); absent on presets.
  std::optional<HostProfile> profile;

  int devices() const { return nodes * devices_per_node; }
  int node_of(int rank) const { return rank / devices_per_node; }
  bool heterogeneous() const { return !node_devices.empty(); }
  const DeviceSpec& device_of_node(int node) const {
    return node_devices.empty() ? device : node_devices[static_cast<size_t>(node)];
  }
  const DeviceSpec& device_of(int rank) const { return device_of_node(node_of(rank)); }
  // Rank `rank`'s speed against `device`'s (their fp32 rates): what the
  // simulator divides the rank's compute time by, and what the planner
  // splits rows by.
  double relative_speed(int rank) const {
    return node_devices.empty() ? 1.0 : device_of(rank).flops_f32 / device.flops_f32;
  }
  // Ranks on each node a group of `ranks` spans: the mesh fills a node's
  // devices first, so a group that spans nodes is spread evenly over
  // min(ranks, nodes) of them.
  int ranks_per_node_of(int ranks) const {
    const int spanned = std::min(ranks, nodes);
    return (ranks + spanned - 1) / spanned;
  }
  // The fewest of `members` any node holding some of them holds: the NICs
  // a collective among them that crosses nodes drives at once.
  int fewest_ranks_on_a_node(const std::vector<int>& members) const;
  // The same for the group {0, stride, 2·stride, ...} of `count` ranks (a
  // mesh axis's group of rank 0).
  int fewest_ranks_on_a_node(int count, int stride) const;
  // The line rate a collective's bytes move at on `link` with
  // `ranks_per_node` members on each node: across nodes, that many NICs at
  // once up to the node's own link (RooflineEstimator::collective_seconds).
  double line_rate(LinkClass link, int ranks_per_node) const {
    if (link == LinkClass::intra_node || ranks_per_node <= 1) return this->link(link).bandwidth;
    return std::min(ranks_per_node * inter_node.bandwidth, intra_node.bandwidth);
  }
  // The link a group of ranks talks over: the network once it spans nodes.
  LinkClass link_between(int a, int b) const {
    return node_of(a) == node_of(b) ? LinkClass::intra_node : LinkClass::inter_node;
  }
  const LinkSpec& link(LinkClass c) const { return c == LinkClass::intra_node ? intra_node : inter_node; }
  bool operator==(const ClusterSpec&) const = default;
};

// Throws px::Error naming the field, its value and what is expected.
void validate(const ClusterSpec& cluster);

nlohmann::json to_json(const ClusterSpec& cluster);
ClusterSpec cluster_from_json(const nlohmann::json& json);

// "dgx-a100", "dgx-h100" (vendor figures; docs/planner.md names the
// sources), optionally ":N" for N nodes ("dgx-a100:64"), "local" (this
// host as `parallax calibrate` saved it at `local_path`, which the CLI
// gives: cli/local_cluster.h), or a path to a cluster JSON file.
// px::Error names the presets otherwise.
ClusterSpec cluster_named(const std::string& spec, const std::string& local_path = "");

// The cluster with every device running `kernel` for attention ("flash"
// or "standard": KernelEfficiency::attention_kernel); throws naming the
// cluster when its devices have no measured rates for it (a calibrated
// host times its own attention kernel).
ClusterSpec with_attention_kernel(ClusterSpec cluster, const std::string& kernel);

// The named preset of one node (plan/presets.cc, where every figure names
// its source), or nullopt.
std::optional<ClusterSpec> preset_cluster(const std::string& name);

ClusterSpec load_cluster(const std::string& path);

// This host as one node of `devices` in-process ranks (threads: any number
// runs, slowed by contention) sharing `memory_bytes`, with `profile`'s rates
// and its transport as both links: the `local` spec.
// Where the ranks a `local` spec describes sit: in-process ranks of this
// one host (the default), or the MPI ranks `parallax calibrate` found on
// `hosts` hosts of `ranks_per_host` each, `between` them the link it
// measured (the spec's inter_node; intra_node is the profile's transport).
struct LocalHosts {
  int hosts = 1;
  int ranks_per_host = 64;
  std::optional<LinkSpec> between;  // absent: one host
  bool share_cores = false;         // the hosts are namespaces of one machine
  // Each host's speed against the profile's device (one rank's GEMM rate,
  // measured a host at a time over many CPU-quota periods, over the rate
  // the profile's kernels were timed at: host 0 in short bursts, so a quota
  // on host 0 puts it below 1 too): the spec's node_devices scale the
  // profile's device by them. Empty: every host runs at the profile's speed.
  std::vector<double> speeds;
  // Each host's CPU quota (empty or zero: none): the spec's node_devices
  // carry them.
  std::vector<CpuQuota> quotas;
};
ClusterSpec local_cluster_spec(HostProfile profile, const std::string& cpu, double memory_bytes,
                               const LocalHosts& hosts = {});

}  // namespace px::plan
