// `parallax report RUN_DIR [RUN_DIR...]`: one self-contained HTML page of
// what runs written by `parallax train --run-dir` did (report/html_report.h):
// loss, throughput, memory and communication; predicted against measured;
// the strategy, its schedule and the traced steps. Several runs are
// overlaid and tabled side by side.
#include <filesystem>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "report/html_report.h"
#include "report/run_directory.h"

namespace px::cli {

void add_report_command(CLI::App& app) {
  struct Flags {
    std::vector<std::string> run_dirs;
    std::string out;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "report", "write an HTML report of runs (train --run-dir): curves, memory, communication, predicted vs "
                "measured, the strategy and its schedule; several runs are compared");
  cmd->add_option("run_dirs", flags->run_dirs, "run directories given to `parallax train --run-dir`")->required();
  cmd->add_option("--out", flags->out,
                  "the HTML file to write (default: RUN_DIR/report.html for one run, compare.html beside the "
                  "first run for several)");
  cmd->callback([flags] {
    namespace fs = std::filesystem;
    std::string out = flags->out;
    if (out.empty()) {
      const fs::path first = fs::path(flags->run_dirs.front()).lexically_normal();
      out = flags->run_dirs.size() == 1 ? (first / "report.html").string()
                                        : (first.parent_path() / "compare.html").string();
    }
    for (const std::string& text : report::write_report(flags->run_dirs, out)) std::cout << text;
    std::cout << fmt::format("wrote the report of {} to '{}' (open it in a browser)\n",
                             flags->run_dirs.size() == 1 ? flags->run_dirs.front()
                                                         : fmt::format("{} runs", flags->run_dirs.size()),
                             out);
  });
}

}  // namespace px::cli
