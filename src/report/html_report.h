// The run report as one self-contained HTML page: the runs' data as JSON
// in the page, and the page's script and style (assets/report.js,
// assets/report.css, compiled in) inline, so it opens from disk in any
// browser with no network. The script draws every chart from the data.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace px::report {

// `runs`: read_run_directory() of each run, in the order given.
std::string render_report(const std::vector<nlohmann::json>& runs, const std::string& generated_at);

// Reads every run directory and writes the report to `out` atomically;
// returns each run's headline figures (describe_run) for the terminal.
std::vector<std::string> write_report(const std::vector<std::string>& run_dirs, const std::string& out);

// The compiled-in assets (generated from assets/ by embed_assets.cmake).
std::string_view report_script();
std::string_view report_style();

}  // namespace px::report
