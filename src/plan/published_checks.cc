#include "plan/published_checks.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/gpt.h"

namespace px::plan {

// published_runs_data.cc, generated from bench/published_runs.json and bench/published_heldout.json
extern const char* const kPublishedRunsJson;
extern const char* const kHeldOutRunsJson;

namespace {

// Narayanan et al.'s count of an iteration's FLOPs with full recomputation,
// by which the sources give teraFLOP/s a GPU.
double megatron_flops(const CheckedRun& r) {
  const auto B = static_cast<double>(r.batch), s = static_cast<double>(r.sequence), l = static_cast<double>(r.layers),
             h = static_cast<double>(r.embd), V = static_cast<double>(r.vocab);
  return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

}  // namespace

double CheckedRun::parameters() const {
  return static_cast<double>(
      nn::parameter_count({.vocab = vocab, .block = sequence, .n_layer = layers, .n_head = heads, .n_embd = embd}));
}

std::vector<CheckedRun> checked_runs(const std::string& text) {
  const nlohmann::json json = nlohmann::json::parse(text);
  const int64_t sequence = json.value("sequence", 2048), vocab = json.value("vocab", 51200);
  std::vector<CheckedRun> runs;
  for (const nlohmann::json& j : json.at("runs")) {
    CheckedRun r{.id = j.at("id"), .preset = j.value("preset", std::string("dgx-a100")), .layers = j.at("layers"),
                 .heads = j.at("heads"), .embd = j.at("embd"), .batch = j.at("batch"), .sequence = sequence,
                 .vocab = vocab, .gpus = j.at("gpus"), .tp = j.at("tp"), .pp = j.at("pp"),
                 .recompute = j.at("recompute"), .sequence_parallel = j.value("sequence_parallel", false),
                 .overlap = j.value("overlap", true),
                 .attention_kernel = j.value("attention_kernel", json.value("attention_kernel", std::string("flash")))};
    const nlohmann::json& p = j.at("published");
    r.published_seconds = p.contains("iteration_seconds")
                              ? p.at("iteration_seconds").get<double>()
                              : megatron_flops(r) / (p.at("tflops_per_gpu").get<double>() * 1e12 * r.gpus);
    if (j.contains("scored")) r.predicted_seconds = j.at("scored").at("predicted_seconds").get<double>();
    runs.push_back(std::move(r));
  }
  return runs;
}

std::vector<CheckedRun> held_out_runs(const std::string& text) {
  const nlohmann::json json = nlohmann::json::parse(text);
  const nlohmann::json scores = json.contains("scoring") ? json.at("scoring").at("predicted_seconds") : nlohmann::json();
  std::vector<CheckedRun> runs;
  for (const nlohmann::json& j : json.at("runs")) {
    CheckedRun r{.id = j.at("id"), .set = "held-out", .preset = j.at("cluster"), .layers = j.at("layers"),
                 .heads = j.at("heads"), .embd = j.at("embd"), .batch = j.at("batch"), .sequence = j.at("seq"),
                 .vocab = j.at("vocab"), .gpus = j.at("gpus"), .tp = j.at("tp"), .pp = j.at("pp"),
                 .recompute = j.at("recompute"), .sequence_parallel = j.value("sequence_parallel", false),
                 .overlap = j.value("overlap", true)};
    const nlohmann::json& p = j.at("published");
    if (p.contains("iteration_seconds")) {
      r.published_seconds = p.at("iteration_seconds").get<double>();
    } else {
      // The source's own count (bench/published_accuracy.sh gives both):
      // Megatron-Core's model FLOPs, or Narayanan et al.'s with recomputation.
      const auto B = static_cast<double>(r.batch), s = static_cast<double>(r.sequence),
                 l = static_cast<double>(r.layers), h = static_cast<double>(r.embd), V = static_cast<double>(r.vocab),
                 ffn = j.at("ffn").get<double>();
      const double flops = p.at("flop_count") == "megatron_model_flops"
                               ? 12 * B * s * l * h * h * ((1 + 1 + s / h) + ffn / h + V / (2 * l * h))
                               : megatron_flops(r);
      r.published_seconds = flops / (p.at("tflops_per_gpu").get<double>() * 1e12 * r.gpus);
    }
    if (scores.contains(r.id)) r.predicted_seconds = scores.at(r.id).get<double>();
    runs.push_back(std::move(r));
  }
  return runs;
}

std::vector<CheckedRun> checked_runs() {
  std::vector<CheckedRun> runs = checked_runs(kPublishedRunsJson);
  for (CheckedRun& r : held_out_runs(kHeldOutRunsJson)) runs.push_back(std::move(r));
  return runs;
}

RunShape run_shape(const parallel::Strategy& strategy, int gpus, double parameters, const std::string& preset) {
  return {.gpus = gpus,
          .tp = gpus / (strategy.pipeline_ranks() * strategy.row_ranks() * strategy.context_ranks()),
          .pp = strategy.pipeline_ranks(),
          .parameters = parameters,
          .preset = preset};
}

std::vector<CheckedRun> nearest_checked_runs(const RunShape& shape, size_t count) {
  PX_CHECK(shape.gpus >= 1 && shape.tp >= 1 && shape.pp >= 1 && shape.parameters > 0, "a run shape of {} GPUs",
           shape.gpus);
  auto distance = [&](const CheckedRun& r) {
    return std::abs(std::log(static_cast<double>(r.gpus) / shape.gpus)) +
           std::abs(std::log(static_cast<double>(r.tp) / shape.tp)) +
           std::abs(std::log(static_cast<double>(r.pp) / shape.pp)) +
           std::abs(std::log(r.parameters() / shape.parameters)) +
           (shape.preset.empty() || r.preset == shape.preset ? 0.0 : 1.0);
  };
  std::vector<CheckedRun> runs;
  for (CheckedRun& r : checked_runs())
    if (r.predicted_seconds > 0) runs.push_back(std::move(r));
  std::stable_sort(runs.begin(), runs.end(),
                   [&](const CheckedRun& a, const CheckedRun& b) { return distance(a) < distance(b); });
  if (runs.size() > count) runs.resize(count);
  return runs;
}

std::string describe_checked(const std::vector<CheckedRun>& runs) {
  std::string s;
  for (const CheckedRun& r : runs)
    s += fmt::format("  {} ({}): {} GPUs, tp {} pp {}, {:.1f}B parameters on {}: predicted {:.2f} s, published "
                     "{:.2f} s ({:+.1f}%)\n",
                     r.id, r.set, r.gpus, r.tp, r.pp, r.parameters() / 1e9, r.preset, r.predicted_seconds,
                     r.published_seconds, 100 * r.error());
  return s;
}

nlohmann::json checked_json(const std::vector<CheckedRun>& runs) {
  nlohmann::json out = nlohmann::json::array();
  for (const CheckedRun& r : runs)
    out.push_back({{"id", r.id},
                   {"set", r.set},
                   {"preset", r.preset},
                   {"gpus", r.gpus},
                   {"tp", r.tp},
                   {"pp", r.pp},
                   {"parameters", r.parameters()},
                   {"predicted_s", r.predicted_seconds},
                   {"published_s", r.published_seconds},
                   {"error", r.error()}});
  return out;
}

}  // namespace px::plan
