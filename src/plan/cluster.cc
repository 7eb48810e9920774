#include "plan/cluster.h"

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"

namespace px::plan {
namespace {

nlohmann::json link_json(const LinkSpec& l) {
  nlohmann::json json{{"name", l.name}, {"bandwidth", l.bandwidth}, {"latency", l.latency}};
  if (l.efficiency != 1) json["efficiency"] = l.efficiency;
  if (l.all_to_all_efficiency != 0) json["all_to_all_efficiency"] = l.all_to_all_efficiency;
  if (l.all_reduce_efficiency != 0) json["all_reduce_efficiency"] = l.all_reduce_efficiency;
  return json;
}

LinkSpec link_from(const nlohmann::json& json, const std::string& where) {
  json_fields::check_keys("cluster", json, where,
                          {"name", "bandwidth", "latency", "efficiency", "all_to_all_efficiency", "all_reduce_efficiency"});
  return {.name = json_fields::field<std::string>("cluster", json, where, "name", ""),
          .bandwidth = json_fields::field<double>("cluster", json, where, "bandwidth", 0),
          .latency = json_fields::field<double>("cluster", json, where, "latency", 0),
          .efficiency = json_fields::field<double>("cluster", json, where, "efficiency", 1),
          .all_to_all_efficiency = json_fields::field<double>("cluster", json, where, "all_to_all_efficiency", 0),
          .all_reduce_efficiency = json_fields::field<double>("cluster", json, where, "all_reduce_efficiency", 0)};
}

nlohmann::json device_json(const DeviceSpec& d) {
  nlohmann::json json{{"name", d.name},
                      {"flops_f32", d.flops_f32},
                      {"flops_bf16", d.flops_bf16},
                      {"memory_bytes", d.memory_bytes},
                      {"memory_bandwidth", d.memory_bandwidth},
                      {"efficiency", to_json(d.efficiency)}};
  if (d.quota.cores > 0) json["cpu_quota"] = {{"cores", d.quota.cores}, {"period", d.quota.period}};
  return json;
}

DeviceSpec device_from(const nlohmann::json& d, const std::string& where) {
  json_fields::check_keys("cluster", d, where,
                          {"name", "flops_f32", "flops_bf16", "memory_bytes", "memory_bandwidth", "efficiency", "cpu_quota"});
  DeviceSpec device{.name = json_fields::field<std::string>("cluster", d, where, "name", ""),
                    .flops_f32 = json_fields::field<double>("cluster", d, where, "flops_f32", 0),
                    .flops_bf16 = json_fields::field<double>("cluster", d, where, "flops_bf16", 0),
                    .memory_bytes = json_fields::field<double>("cluster", d, where, "memory_bytes", 0),
                    .memory_bandwidth = json_fields::field<double>("cluster", d, where, "memory_bandwidth", 0)};
  if (d.contains("efficiency")) device.efficiency = kernel_efficiency_from_json(d.at("efficiency"));
  if (d.contains("cpu_quota")) {
    const nlohmann::json& q = d.at("cpu_quota");
    const std::string at = where + ".cpu_quota";
    json_fields::check_keys("cluster", q, at, {"cores", "period"});
    device.quota = {.cores = json_fields::field<double>("cluster", q, at, "cores", 0),
                    .period = json_fields::field<double>("cluster", q, at, "period", 0)};
  }
  return device;
}

void validate_device(const DeviceSpec& d, const std::string& cluster, const std::string& where) {
  if (!(d.flops_f32 > 0)) fail("cluster '{}': {}.flops_f32 {} must be > 0", cluster, where, d.flops_f32);
  if (d.flops_bf16 < 0) fail("cluster '{}': {}.flops_bf16 {} must be >= 0", cluster, where, d.flops_bf16);
  if (!(d.memory_bytes > 0)) fail("cluster '{}': {}.memory_bytes {} must be > 0", cluster, where, d.memory_bytes);
  if (!(d.memory_bandwidth > 0))
    fail("cluster '{}': {}.memory_bandwidth {} must be > 0", cluster, where, d.memory_bandwidth);
  validate(d.efficiency, cluster);
  if (d.quota.cores < 0 || (d.quota.cores > 0 && !(d.quota.period > 0)))
    fail("cluster '{}': {}.cpu_quota {{cores {}, period {}}}: expected cores >= 0 and, with cores, a period > 0 s",
         cluster, where, d.quota.cores, d.quota.period);
}

}  // namespace

int ClusterSpec::fewest_ranks_on_a_node(const std::vector<int>& members) const {
  std::map<int, int> on_node;
  for (int r : members) ++on_node[node_of(r)];
  int fewest = static_cast<int>(members.size());
  for (const auto& [node, count] : on_node) fewest = std::min(fewest, count);
  return std::max(fewest, 1);
}

int ClusterSpec::fewest_ranks_on_a_node(int count, int stride) const {
  std::vector<int> members;
  for (int i = 0; i < count; ++i) members.push_back(i * stride);
  return fewest_ranks_on_a_node(members);
}

std::string_view link_class_name(LinkClass link) {
  return link == LinkClass::intra_node ? "intra-node" : "inter-node";
}

void validate(const ClusterSpec& c) {
  if (c.nodes < 1) fail("cluster '{}': nodes {} must be >= 1", c.name, c.nodes);
  if (c.devices_per_node < 1) fail("cluster '{}': devices_per_node {} must be >= 1", c.name, c.devices_per_node);
  validate_device(c.device, c.name, "device");
  if (!c.node_devices.empty() && static_cast<int>(c.node_devices.size()) != c.nodes)
    fail("cluster '{}': node_devices has {} specs for {} nodes, expected one per node (or none: every node is "
         "`device`)",
         c.name, c.node_devices.size(), c.nodes);
  for (size_t n = 0; n < c.node_devices.size(); ++n)
    validate_device(c.node_devices[n], c.name, fmt::format("node_devices[{}]", n));
  for (const auto& [where, link] : {std::pair{"intra_node", &c.intra_node}, std::pair{"inter_node", &c.inter_node}}) {
    if (!(link->bandwidth > 0)) fail("cluster '{}': {}.bandwidth {} must be > 0 bytes/s", c.name, where, link->bandwidth);
    if (link->latency < 0) fail("cluster '{}': {}.latency {} must be >= 0 s", c.name, where, link->latency);
    if (!(link->efficiency > 0 && link->efficiency <= 1))
      fail("cluster '{}': {}.efficiency {} must be in (0, 1]", c.name, where, link->efficiency);
    if (!(link->all_to_all_efficiency >= 0 && link->all_to_all_efficiency <= 1))
      fail("cluster '{}': {}.all_to_all_efficiency {} must be in (0, 1], or 0 for efficiency's", c.name, where,
           link->all_to_all_efficiency);
    // Above 1 only where the switch reduces (NVLS): at most twice the line rate, a ring's whole traffic halved.
    if (!(link->all_reduce_efficiency >= 0 && link->all_reduce_efficiency <= 2))
      fail("cluster '{}': {}.all_reduce_efficiency {} must be in (0, 2] (above 1 only where the switch reduces), or 0 "
           "for efficiency's",
           c.name, where, link->all_reduce_efficiency);
  }
}

nlohmann::json to_json(const ClusterSpec& c) {
  nlohmann::json json{{"name", c.name},
          {"nodes", c.nodes},
          {"devices_per_node", c.devices_per_node},
          {"device", device_json(c.device)},
          {"intra_node", link_json(c.intra_node)},
          {"inter_node", link_json(c.inter_node)},
          {"host", c.host}};
  if (!c.node_devices.empty()) {
    json["node_devices"] = nlohmann::json::array();
    for (const DeviceSpec& d : c.node_devices) json["node_devices"].push_back(device_json(d));
  }
  if (c.devices_share_memory) json["devices_share_memory"] = true;
  if (c.nodes_share_cores) json["nodes_share_cores"] = true;
  if (c.profile) json["profile"] = to_json(*c.profile);
  return json;
}

ClusterSpec cluster_from_json(const nlohmann::json& json) {
  json_fields::check_keys("cluster", json, "the cluster",
                          {"name", "nodes", "devices_per_node", "device", "intra_node", "inter_node", "host",
                           "devices_share_memory", "nodes_share_cores", "profile", "node_devices"});
  ClusterSpec c;
  c.name = json_fields::field<std::string>("cluster", json, "cluster", "name", "");
  c.nodes = json_fields::field<int>("cluster", json, "cluster", "nodes", 1);
  c.devices_per_node = json_fields::field<int>("cluster", json, "cluster", "devices_per_node", 1);
  if (json.contains("device")) c.device = device_from(json.at("device"), "device");
  if (json.contains("node_devices")) {
    const nlohmann::json& nodes = json.at("node_devices");
    if (!nodes.is_array()) fail("cluster: node_devices must be an array of device specs, got {}", nodes.dump());
    for (size_t n = 0; n < nodes.size(); ++n)
      c.node_devices.push_back(device_from(nodes[n], fmt::format("node_devices[{}]", n)));
  }
  if (json.contains("intra_node")) c.intra_node = link_from(json.at("intra_node"), "intra_node");
  if (json.contains("inter_node")) c.inter_node = link_from(json.at("inter_node"), "inter_node");
  c.host = json_fields::field<std::string>("cluster", json, "cluster", "host", "");
  c.devices_share_memory = json_fields::field<bool>("cluster", json, "cluster", "devices_share_memory", false);
  c.nodes_share_cores = json_fields::field<bool>("cluster", json, "cluster", "nodes_share_cores", false);
  if (json.contains("profile")) c.profile = profile_from_json(json.at("profile"));
  validate(c);
  return c;
}

ClusterSpec with_attention_kernel(ClusterSpec cluster, const std::string& kernel) {
  if (cluster.profile)
    fail("--attention-kernel {}: cluster '{}' is calibrated on this host, whose profile times its own attention "
         "kernel; the kernels are the GPU presets' (and cluster files' device.efficiency.attention)",
         kernel, cluster.name);
  if (cluster.device.efficiency.attention.empty())
    fail("--attention-kernel {}: cluster '{}' gives no measured attention rates (device.efficiency.attention), so "
         "its attention is costed as a GEMM of the T x T scores whatever the kernel",
         kernel, cluster.name);
  cluster.device.efficiency.attention_kernel = kernel;
  for (DeviceSpec& device : cluster.node_devices) device.efficiency.attention_kernel = kernel;
  validate(cluster);
  return cluster;
}

ClusterSpec cluster_named(const std::string& spec, const std::string& local_path) {
  const size_t colon = spec.rfind(':');
  const std::string name = colon == std::string::npos ? spec : spec.substr(0, colon);
  ClusterSpec c;
  if (std::optional<ClusterSpec> preset = preset_cluster(name)) {
    c = std::move(*preset);
  } else if (spec == "local") {
    const std::string& path = local_path;
    if (path.empty() || !std::filesystem::exists(path))
      fail("--cluster local: this host has not been calibrated ('{}' does not exist); run 'parallax calibrate' "
           "first",
           path);
    return load_cluster(path);
  } else {
    if (!std::filesystem::exists(spec))
      fail("--cluster '{}' is neither a preset (dgx-a100, dgx-h100, optionally :NODES as in dgx-a100:64; local) nor "
           "a readable cluster JSON file",
           spec);
    return load_cluster(spec);
  }
  if (colon != std::string::npos) {
    const std::string count = spec.substr(colon + 1);
    size_t used = 0;
    int nodes = 0;
    try {
      nodes = std::stoi(count, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != count.size() || nodes < 1)
      fail("--cluster '{}': '{}' is not a node count >= 1 (as in {}:64)", spec, count, name);
    c.nodes = nodes;
  }
  validate(c);
  return c;
}

ClusterSpec local_cluster_spec(HostProfile profile, const std::string& cpu, double memory_bytes,
                               const LocalHosts& hosts) {
  const comm::LinkCost link = profile.comm.transport;
  const int cores = profile.cores;
  const std::string transport = profile.comm.backend == "inproc" ? "in-process transport"
                                                                 : fmt::format("{} inside a host", profile.comm.backend);
  const LinkSpec inside{.name = transport, .bandwidth = 1 / link.beta, .latency = link.alpha};
  ClusterSpec spec{.name = "local",
          .nodes = hosts.hosts,
          .devices_per_node = hosts.ranks_per_host,
          .device = {.name = fmt::format("{} rank", cpu),
                     .flops_f32 = profile.flops,
                     // The GEMMs of a graph stamped bf16 run at it (the profiled
                     // estimator reads each node's stamp); 0 without AVX512_BF16.
                     .flops_bf16 = profile.flops_bf16,
                     .memory_bytes = memory_bytes,
                     .memory_bandwidth = profile.memory_bandwidth},
          .intra_node = inside,
          .inter_node = hosts.between.value_or(inside),
          .host = fmt::format("{} ({} cores)", cpu, cores),
          .devices_share_memory = true,
          .nodes_share_cores = hosts.hosts > 1 && hosts.share_cores,
          .profile = std::move(profile)};
  if (hosts.speeds.empty()) return spec;
  if (static_cast<int>(hosts.speeds.size()) != hosts.hosts)
    fail("local spec: {} host speeds for {} hosts", hosts.speeds.size(), hosts.hosts);
  for (size_t n = 0; n < hosts.speeds.size(); ++n) {
    DeviceSpec device = spec.device;
    device.name = fmt::format("{} (host {}, {:.0f}% of the profile's speed)", spec.device.name, n, 100 * hosts.speeds[n]);
    device.flops_f32 *= hosts.speeds[n];
    device.flops_bf16 *= hosts.speeds[n];
    if (n < hosts.quotas.size()) device.quota = hosts.quotas[n];
    spec.node_devices.push_back(std::move(device));
  }
  return spec;
}

ClusterSpec load_cluster(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read cluster file '{}'", path);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("cluster file '{}' is not valid JSON: {}", path, e.what());
  }
  try {
    return cluster_from_json(json);
  } catch (const Error& e) {
    fail("cluster file '{}': {}", path, e.what());
  }
}

}  // namespace px::plan
