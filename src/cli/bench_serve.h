// `parallax bench serve`: an open-loop load generator for an
// OpenAI-compatible completion server (vLLM's benchmark_serving): against
// a running one (--url) or `parallax serve` started in this process
// (--checkpoint). See docs/serving.md.
#pragma once

#include <CLI/CLI.hpp>

namespace px::cli {

// Adds the `serve` subcommand to `bench`.
void add_bench_serve_command(CLI::App& bench);

}  // namespace px::cli
