#include "plan/efficiency.h"

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

double gemm_peak_fraction(const GemmEfficiency& tiles, double achieved, double peak, double m, double n) {
  return achieved / (peak * gemm_quantisation(tiles, m, n));
}

nlohmann::json to_json(const KernelEfficiency& e) {
  return {{"gemm",
           {{"peak_fraction", e.gemm.peak_fraction},
            {"tile_m", e.gemm.tile_m},
            {"tile_n", e.gemm.tile_n},
            {"units", e.gemm.units}}},
          {"memory_fraction", e.memory_fraction},
          {"launch_seconds", e.launch_seconds}};
}

KernelEfficiency kernel_efficiency_from_json(const nlohmann::json& json) {
  const std::string doc = "cluster";
  json_fields::check_keys(doc, json, "device.efficiency", {"gemm", "memory_fraction", "launch_seconds"});
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
}

}  // namespace px::plan
