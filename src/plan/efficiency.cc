#include "plan/efficiency.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"

namespace px::plan {

double gemm_quantisation(const GemmEfficiency& g, double m, double n, double batch) {
  if (m <= 0 || n <= 0 || batch <= 0) return 1;
  const double tm = static_cast<double>(g.tile_m), tn = static_cast<double>(g.tile_n);
  const double tiles = batch * std::ceil(m / tm) * std::ceil(n / tn);
  const double units = static_cast<double>(g.units);
  const double waves = std::ceil(tiles / units);
  return m * n * batch / (waves * units * tm * tn);
}

GemmEfficiency beside_collective(const KernelEfficiency& e) {
  GemmEfficiency gemm = e.gemm;
  gemm.units = std::max<int64_t>(1, gemm.units - e.collective_units);
  // The peak is every unit's: the units left do their share of it (and
  // the quantisation then counts the waves on them).
  gemm.peak_fraction *= static_cast<double>(gemm.units) / static_cast<double>(e.gemm.units);
  return gemm;
}

namespace {

// Linear interpolation of y over x through points sorted by x, clamped.
double interpolate(const std::vector<std::pair<double, double>>& points, double x) {
  if (x <= points.front().first) return points.front().second;
  if (x >= points.back().first) return points.back().second;
  auto hi = std::upper_bound(points.begin(), points.end(), x, [](double v, const auto& p) { return v < p.first; });
  auto lo = std::prev(hi);
  return lo->second + (hi->second - lo->second) * (x - lo->first) / (hi->first - lo->first);
}

}  // namespace

double attention_rate(const std::vector<AttentionRate>& rates, const std::string& kernel, double head_dim, double seq,
                      bool causal) {
  // Per measured head dimension, the rate at log2(seq); then across head dimensions.
  std::map<int64_t, std::vector<std::pair<double, double>>> by_head_dim;
  for (const AttentionRate& r : rates)
    if (r.kernel == kernel && r.causal == causal) by_head_dim[r.head_dim].emplace_back(std::log2(static_cast<double>(r.seq)), r.flops);
  if (by_head_dim.empty()) return 0;
  std::vector<std::pair<double, double>> at_seq;
  for (auto& [dim, points] : by_head_dim) {
    std::sort(points.begin(), points.end());
    at_seq.emplace_back(static_cast<double>(dim), interpolate(points, std::log2(seq)));
  }
  return interpolate(at_seq, head_dim);
}

double flash_attention_forward_flops(double batch_heads, double seq, double head_dim, bool causal) {
  return 4 * batch_heads * seq * seq * head_dim / (causal ? 2 : 1);
}

double gemm_peak_fraction(const GemmEfficiency& tiles, double achieved, double peak, double m, double n) {
  return achieved / (peak * gemm_quantisation(tiles, m, n));
}

nlohmann::json to_json(const KernelEfficiency& e) {
  nlohmann::json json = {{"gemm",
                          {{"peak_fraction", e.gemm.peak_fraction},
                           {"tile_m", e.gemm.tile_m},
                           {"tile_n", e.gemm.tile_n},
                           {"units", e.gemm.units}}},
                         {"memory_fraction", e.memory_fraction},
                         {"launch_seconds", e.launch_seconds}};
  if (e.collective_units != 0) json["collective_units"] = e.collective_units;
  for (const AttentionRate& r : e.attention)
    json["attention"].push_back(
        {{"kernel", r.kernel}, {"head_dim", r.head_dim}, {"seq", r.seq}, {"causal", r.causal}, {"flops", r.flops}});
  if (!e.attention.empty()) json["attention_kernel"] = e.attention_kernel;
  return json;
}

KernelEfficiency kernel_efficiency_from_json(const nlohmann::json& json) {
  const std::string doc = "cluster";
  json_fields::check_keys(doc, json, "device.efficiency",
                          {"gemm", "attention", "attention_kernel", "memory_fraction", "launch_seconds", "collective_units"});
  KernelEfficiency e;
  if (json.contains("gemm")) {
    const nlohmann::json& g = json.at("gemm");
    const std::string where = "device.efficiency.gemm";
    json_fields::check_keys(doc, g, where, {"peak_fraction", "tile_m", "tile_n", "units"});
    e.gemm = {.peak_fraction = json_fields::field<double>(doc, g, where, "peak_fraction", 1),
              .tile_m = json_fields::field<int64_t>(doc, g, where, "tile_m", 1),
              .tile_n = json_fields::field<int64_t>(doc, g, where, "tile_n", 1),
              .units = json_fields::field<int64_t>(doc, g, where, "units", 1)};
  }
  if (json.contains("attention")) {
    const nlohmann::json& list = json.at("attention");
    if (!list.is_array())
      fail("cluster: device.efficiency.attention is {}; expected a list of {{kernel, head_dim, seq, causal, flops}}",
           list.dump());
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string where = fmt::format("device.efficiency.attention[{}]", i);
      json_fields::check_keys(doc, list[i], where, {"kernel", "head_dim", "seq", "causal", "flops"});
      e.attention.push_back({.kernel = json_fields::field<std::string>(doc, list[i], where, "kernel", "flash"),
                             .head_dim = json_fields::field<int64_t>(doc, list[i], where, "head_dim", 0),
                             .seq = json_fields::field<int64_t>(doc, list[i], where, "seq", 0),
                             .causal = json_fields::field<bool>(doc, list[i], where, "causal", true),
                             .flops = json_fields::field<double>(doc, list[i], where, "flops", 0)});
    }
  }
  e.attention_kernel = json_fields::field<std::string>(doc, json, "device.efficiency", "attention_kernel", "flash");
  e.memory_fraction = json_fields::field<double>(doc, json, "device.efficiency", "memory_fraction", 1);
  e.launch_seconds = json_fields::field<double>(doc, json, "device.efficiency", "launch_seconds", 0);
  e.collective_units = json_fields::field<int64_t>(doc, json, "device.efficiency", "collective_units", 0);
  return e;
}

void validate(const KernelEfficiency& e, const std::string& cluster) {
  if (!(e.gemm.peak_fraction > 0 && e.gemm.peak_fraction <= 1))
    fail("cluster '{}': device.efficiency.gemm.peak_fraction {} must be in (0, 1]", cluster, e.gemm.peak_fraction);
  if (e.gemm.tile_m < 1 || e.gemm.tile_n < 1 || e.gemm.units < 1)
    fail("cluster '{}': device.efficiency.gemm tile {}x{} on {} units: each must be >= 1", cluster, e.gemm.tile_m,
         e.gemm.tile_n, e.gemm.units);
  if (!(e.memory_fraction > 0 && e.memory_fraction <= 1))
    fail("cluster '{}': device.efficiency.memory_fraction {} must be in (0, 1]", cluster, e.memory_fraction);
  if (e.launch_seconds < 0)
    fail("cluster '{}': device.efficiency.launch_seconds {} must be >= 0", cluster, e.launch_seconds);
  for (size_t i = 0; i < e.attention.size(); ++i) {
    const AttentionRate& r = e.attention[i];
    if (r.head_dim < 1 || r.seq < 1 || !(r.flops > 0))
      fail("cluster '{}': device.efficiency.attention[{}] has head_dim {}, seq {}, flops {}; expected each > 0",
           cluster, i, r.head_dim, r.seq, r.flops);
  }
  if (!e.attention.empty()) {
    std::set<std::string> kernels;
    for (const AttentionRate& r : e.attention) kernels.insert(r.kernel);
    if (!kernels.count(e.attention_kernel)) {
      std::string list;
      for (const std::string& k : kernels) list += (list.empty() ? "" : ", ") + k;
      fail("cluster '{}': device.efficiency.attention_kernel '{}' has no rates in device.efficiency.attention "
           "(expected one of: {})",
           cluster, e.attention_kernel, list);
    }
  }
  if (e.collective_units < 0 || e.collective_units >= e.gemm.units)
    fail("cluster '{}': device.efficiency.collective_units {} must be in [0, {}) (gemm.units: a GEMM keeps at least one)",
         cluster, e.collective_units, e.gemm.units);
}

}  // namespace px::plan
