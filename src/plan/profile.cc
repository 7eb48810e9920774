#include "plan/profile.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "graph/op.h"
#include "graph/precision.h"

namespace px::plan {

std::string kernel_key(const Graph& graph, const Node& node, int threads) {
  std::string inputs;
  for (ValueId v : node.inputs) inputs += (inputs.empty() ? "" : ",") + graph.spec(v).str();
  return fmt::format("{}{}({})@{}", node.op(), node.attrs.str(), inputs, threads);
}

OpCost node_cost(const Graph& graph, const Node& node) {
  std::vector<TensorSpec> in, out;
  for (ValueId v : node.inputs) in.push_back(graph.spec(v));
  for (ValueId v : node.outputs) out.push_back(graph.spec(v));
  return node.def->cost ? node.def->cost(in, out, node.attrs) : streaming_cost(in, out);
}

double roofline_seconds(const HostProfile& profile, const OpCost& cost) {
  return std::max(cost.flops / profile.flops, (cost.bytes_read + cost.bytes_written) / profile.memory_bandwidth);
}

namespace {

// Whether a profile key names a node stamped bf16 (kernel_key prints its attributes).
bool bf16_key(const std::string& key) { return key.find("precision=bf16") != std::string::npos; }

// The op's timings of this precision by roofline time: the measured /
// roofline ratio between the two nearest (linear in log roofline), held
// beyond the ends; the roofline when the op has none.
double interpolated_seconds(const HostProfile& profile, const Graph& graph, const Node& node, int threads) {
  const double roofline = roofline_seconds(profile, node_cost(graph, node));
  const bool bf16 = precision_of(node.attrs) == Precision::bf16;
  const KernelTiming* below = nullptr;
  const KernelTiming* above = nullptr;
  for (const auto& [key, t] : profile.kernels) {
    if (t.op != node.op() || t.threads != threads || t.roofline <= 0 || bf16_key(key) != bf16) continue;
    if (t.roofline <= roofline && (!below || t.roofline > below->roofline)) below = &t;
    if (t.roofline >= roofline && (!above || t.roofline < above->roofline)) above = &t;
  }
  if (!below && !above) return roofline;
  if (!below || !above || above->roofline == below->roofline) {
    const KernelTiming& t = below ? *below : *above;
    return roofline * t.seconds / t.roofline;
  }
  const double w = std::log(roofline / below->roofline) / std::log(above->roofline / below->roofline);
  const double ratio = std::exp((1 - w) * std::log(below->seconds / below->roofline) +
                                w * std::log(above->seconds / above->roofline));
  return roofline * ratio;
}

bool has_bf16_timings(const HostProfile& profile, const Node& node, int threads) {
  for (const auto& [key, t] : profile.kernels)
    if (t.op == node.op() && t.threads == threads && bf16_key(key)) return true;
  return false;
}

}  // namespace

double bf16_gemm_seconds(const HostProfile& profile, const Graph& graph, const Node& node, int threads) {
  Node twin = node;
  twin.attrs.erase("precision");
  const double fp32 = kernel_seconds(profile, graph, twin, threads);
  // The rounding pass: each fp32 operand read, its bf16 copy written, at
  // the bandwidth past the cache (at the cache's the 116 bf16 GEMMs of a
  // calibrated gpt-mini came out 31% fast in the median, at this one 1%).
  double operand_elements = 0;
  for (ValueId v : node.inputs) operand_elements += static_cast<double>(graph.spec(v).shape.numel());
  const double rounding = operand_elements * (sizeof(float) + 2) / profile.memory_bandwidth;
  return fp32 * profile.flops / profile.flops_bf16 + rounding;
}

double kernel_seconds(const HostProfile& profile, const Graph& graph, const Node& node, int threads) {
  if (auto it = profile.kernels.find(kernel_key(graph, node, threads)); it != profile.kernels.end())
    return it->second.seconds;
  if (precision_of(node.attrs) == Precision::bf16 && !has_bf16_timings(profile, node, threads)) {
    if (!node.def->bf16_gemm) {  // attention, gelu: their fp32 twin's time
      Node twin = node;
      twin.attrs.erase("precision");
      return kernel_seconds(profile, graph, twin, threads);
    }
    if (profile.flops_bf16 <= 0)
      fail("node '{}' ({}) runs in bf16, but the profile has no bf16 GEMM rate: run parallax calibrate on a CPU "
           "with AVX512_BF16",
           node.name, node.op());
    return bf16_gemm_seconds(profile, graph, node, threads);
  }
  return interpolated_seconds(profile, graph, node, threads);
}

double HostProfile::pass_seconds(double bytes) const {
  const bool cached = cache_bandwidth > 0 && bytes <= cache_bytes;
  return bytes / (cached ? cache_bandwidth : memory_bandwidth);
}

double contention(const HostProfile& profile, double ranks, bool memory_bound) {
  const std::vector<double>& measured = memory_bound ? profile.contention_memory : profile.contention_compute;
  if (ranks <= 1 || measured.empty()) return 1;
  const double k = static_cast<double>(measured.size());
  // Past what was measured the cores are shared: the last measurement, scaled by the ranks.
  if (ranks >= k) return measured.back() * ranks / k;
  const size_t below = static_cast<size_t>(std::floor(ranks));  // 1-based count: measured[below - 1]
  const double w = ranks - std::floor(ranks);
  return (1 - w) * measured[below - 1] + w * measured[below];
}

nlohmann::json to_json(const HostProfile& p) {
  nlohmann::json kernels = nlohmann::json::object();
  for (const auto& [key, t] : p.kernels)
    kernels[key] = {{"op", t.op}, {"threads", t.threads}, {"roofline", t.roofline}, {"seconds", t.seconds}};
  nlohmann::json codecs = nlohmann::json::object();
  for (const auto& [method, t] : p.codecs) codecs[method] = {{"encode", t.encode}, {"decode", t.decode}};
  return {{"cores", p.cores},
          {"flops", p.flops},
          {"flops_bf16", p.flops_bf16},
          {"memory_bandwidth", p.memory_bandwidth},
          {"cache_bandwidth", p.cache_bandwidth},
          {"cache_bytes", p.cache_bytes},
          {"contention_compute", p.contention_compute},
          {"contention_memory", p.contention_memory},
          {"comm", nlohmann::json::parse(comm::cost_model_to_json(p.comm))},
          {"codecs", codecs},
          {"kernels", kernels}};
}

HostProfile profile_from_json(const nlohmann::json& json) {
  const std::string doc = "cluster";
  json_fields::check_keys(doc, json, "profile",
                          {"cores", "flops", "flops_bf16", "memory_bandwidth", "cache_bandwidth", "cache_bytes", "contention_compute", "contention_memory",
                           "comm", "kernels", "codecs",
                           // Specs calibrated before 2026-11-27 hold a model-level factor no longer used: ignored.
                           "in_situ_samples"});
  HostProfile p;
  p.cores = json_fields::field<int>(doc, json, "profile", "cores", 1);
  p.flops = json_fields::field<double>(doc, json, "profile", "flops", 0);
  p.flops_bf16 = json_fields::field<double>(doc, json, "profile", "flops_bf16", 0);
  p.memory_bandwidth = json_fields::field<double>(doc, json, "profile", "memory_bandwidth", 0);
  p.cache_bandwidth = json_fields::field<double>(doc, json, "profile", "cache_bandwidth", 0);
  p.cache_bytes = json_fields::field<double>(doc, json, "profile", "cache_bytes", 0);
  p.contention_compute = json_fields::field<std::vector<double>>(doc, json, "profile", "contention_compute", {});
  p.contention_memory = json_fields::field<std::vector<double>>(doc, json, "profile", "contention_memory", {});
  if (p.cores < 1) fail("cluster: profile.cores {} must be >= 1", p.cores);
  if (!(p.flops > 0)) fail("cluster: profile.flops {} must be > 0 FLOP/s", p.flops);
  if (!(p.flops_bf16 >= 0))
    fail("cluster: profile.flops_bf16 {} must be >= 0 FLOP/s (0: no bf16 GEMM measured)", p.flops_bf16);
  if (!(p.memory_bandwidth > 0)) fail("cluster: profile.memory_bandwidth {} must be > 0 bytes/s", p.memory_bandwidth);
  for (const auto* curve : {&p.contention_compute, &p.contention_memory})
    for (double f : *curve)
      if (!(f > 0)) fail("cluster: profile.contention_* holds {}, expected factors > 0", f);
  if (json.contains("comm")) p.comm = comm::cost_model_from_json(json.at("comm").dump(), "cluster profile.comm");
  if (json.contains("codecs")) {
    const nlohmann::json& codecs = json.at("codecs");
    if (!codecs.is_object()) fail("cluster: profile.codecs must be an object of timings, got {}", codecs.dump());
    for (const auto& [method, t] : codecs.items()) {
      const std::string where = "profile.codecs[\"" + method + "\"]";
      json_fields::check_keys(doc, t, where, {"encode", "decode"});
      const CodecTiming timing{.encode = json_fields::field<double>(doc, t, where, "encode", 0),
                               .decode = json_fields::field<double>(doc, t, where, "decode", 0)};
      if (!(timing.encode >= 0) || !(timing.decode >= 0))
        fail("cluster: {} is {}, expected seconds per element >= 0", where, t.dump());
      p.codecs.emplace(method, timing);
    }
  }
  if (json.contains("kernels")) {
    const nlohmann::json& kernels = json.at("kernels");
    if (!kernels.is_object()) fail("cluster: profile.kernels must be an object of timings, got {}", kernels.dump());
    for (const auto& [key, t] : kernels.items()) {
      const std::string where = "profile.kernels[\"" + key + "\"]";
      json_fields::check_keys(doc, t, where, {"op", "threads", "roofline", "seconds"});
      KernelTiming timing{.op = json_fields::field<std::string>(doc, t, where, "op", ""),
                          .threads = json_fields::field<int>(doc, t, where, "threads", 1),
                          .roofline = json_fields::field<double>(doc, t, where, "roofline", 0),
                          .seconds = json_fields::field<double>(doc, t, where, "seconds", 0)};
      if (!(timing.seconds > 0) || timing.roofline < 0 || timing.op.empty() || timing.threads < 1)
        fail("cluster: {} is {}, expected an op, threads >= 1, a roofline >= 0 and seconds > 0", where, t.dump());
      p.kernels.emplace(key, std::move(timing));
    }
  }
  return p;
}

}  // namespace px::plan
