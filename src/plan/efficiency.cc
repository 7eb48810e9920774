#include "plan/efficiency.h"

#include <algorithm>
#include <cmath>

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
  return json;
}

KernelEfficiency kernel_efficiency_from_json(const nlohmann::json& json) {
  const std::string doc = "cluster";
  json_fields::check_keys(doc, json, "device.efficiency",
                          {"gemm", "memory_fraction", "launch_seconds", "collective_units"});
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
  if (e.collective_units < 0 || e.collective_units >= e.gemm.units)
    fail("cluster '{}': device.efficiency.collective_units {} must be in [0, {}) (gemm.units: a GEMM keeps at least one)",
         cluster, e.collective_units, e.gemm.units);
}

}  // namespace px::plan
