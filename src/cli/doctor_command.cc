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

}  // namespace

void add_doctor_command(CLI::App& app) {
  auto run_dirs = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand(
      "doctor",
      "read a run's flight records (train --run-dir) and name the rank that fell behind and where, and its "
      "straggler scores");
  cmd->add_option("run_dir", *run_dirs,
                  "the run directory given to `parallax train --run-dir`; several: each host's own, gathered "
                  "(every rank's record in one of them)")
      ->required();
  cmd->callback([run_dirs] {
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    const FlightDiagnosis d =
        diagnose(read_flight_records(*run_dirs), int64_t(now.tv_sec) * 1'000'000'000 + now.tv_nsec);
    std::cout << d.report;
    for (const std::string& dir : *run_dirs) std::cout << describe_stragglers(dir);
  });
}

}  // namespace px::cli
