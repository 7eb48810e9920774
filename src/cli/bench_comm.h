// `parallax bench comm`: collectives benchmark (nccl-tests style) and cost
// model tuning, in-process (--ranks N) or under mpirun (detected).
#pragma once

#include <CLI/CLI.hpp>

namespace px::cli {

// Adds the `comm` subcommand to `bench`.
void add_bench_comm_command(CLI::App& bench);

}  // namespace px::cli
