// Subcommands of the `parallax` command. Each adds itself to the app with
// its own options struct, parsed once, and a callback that runs it.
#pragma once

#include <CLI/CLI.hpp>

namespace px::cli {

void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_sample_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_lower_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_doctor_command(CLI::App& app);
void add_launch_command(CLI::App& app);
void add_report_command(CLI::App& app);

}  // namespace px::cli
