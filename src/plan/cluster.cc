#include "plan/cluster.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"

namespace px::plan {
namespace {

nlohmann::json link_json(const LinkSpec& l) {
  nlohmann::json json{{"name", l.name}, {"bandwidth", l.bandwidth}, {"latency", l.latency}};
  if (l.efficiency != 1) json["efficiency"] = l.efficiency;
  return json;
}

LinkSpec link_from(const nlohmann::json& json, const std::string& where) {
  json_fields::check_keys("cluster", json, where, {"name", "bandwidth", "latency", "efficiency"});
  return {.name = json_fields::field<std::string>("cluster", json, where, "name", ""),
          .bandwidth = json_fields::field<double>("cluster", json, where, "bandwidth", 0),
          .latency = json_fields::field<double>("cluster", json, where, "latency", 0),
          .efficiency = json_fields::field<double>("cluster", json, where, "efficiency", 1)};
}

}  // namespace

std::string_view link_class_name(LinkClass link) {
  return link == LinkClass::intra_node ? "intra-node" : "inter-node";
}

void validate(const ClusterSpec& c) {
  if (c.nodes < 1) fail("cluster '{}': nodes {} must be >= 1", c.name, c.nodes);
  if (c.devices_per_node < 1) fail("cluster '{}': devices_per_node {} must be >= 1", c.name, c.devices_per_node);
  if (!(c.device.flops_f32 > 0)) fail("cluster '{}': device.flops_f32 {} must be > 0", c.name, c.device.flops_f32);
  if (c.device.flops_bf16 < 0) fail("cluster '{}': device.flops_bf16 {} must be >= 0", c.name, c.device.flops_bf16);
  if (!(c.device.memory_bytes > 0)) fail("cluster '{}': device.memory_bytes {} must be > 0", c.name, c.device.memory_bytes);
  if (!(c.device.memory_bandwidth > 0))
    fail("cluster '{}': device.memory_bandwidth {} must be > 0", c.name, c.device.memory_bandwidth);
  validate(c.device.efficiency, c.name);
  for (const auto& [where, link] : {std::pair{"intra_node", &c.intra_node}, std::pair{"inter_node", &c.inter_node}}) {
    if (!(link->bandwidth > 0)) fail("cluster '{}': {}.bandwidth {} must be > 0 bytes/s", c.name, where, link->bandwidth);
    if (link->latency < 0) fail("cluster '{}': {}.latency {} must be >= 0 s", c.name, where, link->latency);
    if (!(link->efficiency > 0 && link->efficiency <= 1))
      fail("cluster '{}': {}.efficiency {} must be in (0, 1]", c.name, where, link->efficiency);
  }
}

nlohmann::json to_json(const ClusterSpec& c) {
  nlohmann::json json{{"name", c.name},
          {"nodes", c.nodes},
          {"devices_per_node", c.devices_per_node},
          {"device",
           {{"name", c.device.name},
            {"flops_f32", c.device.flops_f32},
            {"flops_bf16", c.device.flops_bf16},
            {"memory_bytes", c.device.memory_bytes},
            {"memory_bandwidth", c.device.memory_bandwidth},
            {"efficiency", to_json(c.device.efficiency)}}},
          {"intra_node", link_json(c.intra_node)},
          {"inter_node", link_json(c.inter_node)},
          {"host", c.host}};
  if (c.devices_share_memory) json["devices_share_memory"] = true;
  if (c.nodes_share_cores) json["nodes_share_cores"] = true;
  if (c.profile) json["profile"] = to_json(*c.profile);
  return json;
}

ClusterSpec cluster_from_json(const nlohmann::json& json) {
  json_fields::check_keys("cluster", json, "the cluster",
                          {"name", "nodes", "devices_per_node", "device", "intra_node", "inter_node", "host",
                           "devices_share_memory", "nodes_share_cores", "profile"});
  ClusterSpec c;
  c.name = json_fields::field<std::string>("cluster", json, "cluster", "name", "");
  c.nodes = json_fields::field<int>("cluster", json, "cluster", "nodes", 1);
  c.devices_per_node = json_fields::field<int>("cluster", json, "cluster", "devices_per_node", 1);
  if (json.contains("device")) {
    const nlohmann::json& d = json.at("device");
    json_fields::check_keys("cluster", d, "device", {"name", "flops_f32", "flops_bf16", "memory_bytes", "memory_bandwidth", "efficiency"});
    c.device = {.name = json_fields::field<std::string>("cluster", d, "device", "name", ""),
                .flops_f32 = json_fields::field<double>("cluster", d, "device", "flops_f32", 0),
                .flops_bf16 = json_fields::field<double>("cluster", d, "device", "flops_bf16", 0),
                .memory_bytes = json_fields::field<double>("cluster", d, "device", "memory_bytes", 0),
                .memory_bandwidth = json_fields::field<double>("cluster", d, "device", "memory_bandwidth", 0)};
    if (d.contains("efficiency")) c.device.efficiency = kernel_efficiency_from_json(d.at("efficiency"));
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
  return {.name = "local",
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
