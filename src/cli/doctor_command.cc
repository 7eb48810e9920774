// `parallax doctor RUN_DIR...`: every rank's flight record side by side, and
// which rank fell behind, where, and what the others wait for
// (runtime/fault/flight_report.h). Several run directories are one job's
// records gathered from hosts that share no filesystem (each directory
// holds its host's ranks). A run directory's metrics add its ranks'
// straggler scores: the last window's, and when each rank was named
// and recovered (runtime/train/straggler_watch.h, runtime/sync/).
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "runtime/fault/flight_report.h"

namespace px::cli {
namespace {

// The straggler lines of <dir>/metrics.jsonl, as the doctor reports them ("" when none).
std::string describe_stragglers(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line, events, last;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    if (j.contains("scores") && j["scores"].is_array()) {
      std::vector<std::string> scores;
      for (size_t r = 0; r < j["scores"].size(); ++r)
        scores.push_back(fmt::format("rank {} {:.2f}", r, j["scores"][r].get<double>()));
      last = fmt::format("  at step {}: {}\n", j.value("step", int64_t{0}), fmt::join(scores, ", "));
    }
    if (j.contains("straggler"))
      events += fmt::format("  step {}: rank {} {} (score {:.2f}, {:.2f}x its own best)\n", j.value("step", int64_t{0}),
                            j["straggler"].get<int>(), j.value("straggling", false) ? "named a straggler" : "recovered",
                            j.value("score", 0.0), j.value("vs_best", 0.0));
  }
  if (last.empty() && events.empty()) return "";
  return fmt::format("straggler scores in {} (recent step compute against the fastest rank's):\n{}{}", dir, last,
                     events);
}

// An expert that took more than `threshold` of its layer's choices over
// the last `window` steps of <dir>/metrics.jsonl ("moe" entries,
// runtime/train/routing_report.h), named with its share; "" when the
// run has no mixture of experts. threshold 0: twice the even share 1/E.
std::string describe_expert_load(const std::string& dir, double threshold, int64_t window) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> steps;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("moe") && j["moe"].is_array()) steps.push_back(std::move(j));
  }
  if (steps.empty()) return "";
  const size_t first = steps.size() > static_cast<size_t>(window) ? steps.size() - static_cast<size_t>(window) : 0;
  std::map<int64_t, std::vector<double>> shares;  // layer -> mean share per expert over the window
  for (size_t s = first; s < steps.size(); ++s)
    for (const nlohmann::json& layer : steps[s]["moe"]) {
      std::vector<double>& mean = shares[layer.value("layer", int64_t{0})];
      const nlohmann::json& load = layer["load"];
      mean.resize(std::max(mean.size(), load.size()), 0.0);
      for (size_t e = 0; e < load.size(); ++e) mean[e] += load[e].get<double>() / double(steps.size() - first);
    }
  const int64_t from = steps[first].value("step", int64_t{0}), to = steps.back().value("step", int64_t{0});
  std::string named;
  for (const auto& [layer, mean] : shares) {
    const double limit = threshold > 0 ? threshold : 2.0 / double(mean.size());
    for (size_t e = 0; e < mean.size(); ++e)
      if (mean[e] > limit)
        named += fmt::format("  layer {} expert {} took {:.1f}% of the choices (even share {:.1f}%, threshold {:.1f}%)\n",
                             layer, e, 100 * mean[e], 100.0 / double(mean.size()), 100 * limit);
  }
  return fmt::format("expert load in {} over steps {}-{}: {}", dir, from, to,
                     named.empty() ? "every expert within its threshold\n" : "\n" + named);
}

}  // namespace

void add_doctor_command(CLI::App& app) {
  auto run_dirs = std::make_shared<std::vector<std::string>>();
  auto expert_share = std::make_shared<double>(0.0);
  auto expert_window = std::make_shared<int64_t>(20);
  CLI::App* cmd = app.add_subcommand(
      "doctor",
      "read a run's flight records (train --run-dir) and name the rank that fell behind and where, and its "
      "straggler scores");
  cmd->add_option("run_dir", *run_dirs,
                  "the run directory given to `parallax train --run-dir`; several: each host's own, gathered "
                  "(every rank's record in one of them)")
      ->required();
  cmd->add_option("--expert-share", *expert_share,
                  "a mixture of experts: name an expert that takes more than this share of its layer's choices "
                  "(0: twice the even share, 2/experts)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--expert-window", *expert_window, "steps (the last ones) the expert shares are averaged over")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->callback([run_dirs, expert_share, expert_window] {
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    const FlightDiagnosis d =
        diagnose(read_flight_records(*run_dirs), int64_t(now.tv_sec) * 1'000'000'000 + now.tv_nsec);
    std::cout << d.report;
    for (const std::string& dir : *run_dirs)
      std::cout << describe_stragglers(dir) << describe_expert_load(dir, *expert_share, *expert_window);
  });
}

}  // namespace px::cli
