// `parallax doctor RUN_DIR...`: every rank's flight record side by side, and
// which rank fell behind, where, and what the others wait for
// (runtime/fault/flight_report.h). Several run directories are one job's
// records gathered from hosts that share no filesystem (each directory
// holds its host's ranks).
#include <ctime>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "runtime/fault/flight_report.h"

namespace px::cli {

void add_doctor_command(CLI::App& app) {
  auto run_dirs = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand(
      "doctor", "read a run's flight records (train --run-dir) and name the rank that fell behind and where");
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
  });
}

}  // namespace px::cli
