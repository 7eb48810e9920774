// `parallax doctor RUN_DIR`: every rank's flight record side by side, and
// which rank fell behind, where, and what the others wait for
// (runtime/fault/flight_report.h).
#include <ctime>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "runtime/fault/flight_report.h"

namespace px::cli {

void add_doctor_command(CLI::App& app) {
  auto run_dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "doctor", "read a run's flight records (train --run-dir) and name the rank that fell behind and where");
  cmd->add_option("run_dir", *run_dir, "the run directory given to `parallax train --run-dir`")->required();
  cmd->callback([run_dir] {
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    const FlightDiagnosis d =
        diagnose(read_flight_records(*run_dir), int64_t(now.tv_sec) * 1'000'000'000 + now.tv_nsec);
    std::cout << d.report;
  });
}

}  // namespace px::cli
