#include "report/run_directory.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "report/trace_summary.h"

namespace px::report {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read '{}'", path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    fail("'{}' is not JSON ({}); was it cut off?", path.string(), e.what());
  }
}

// One object per non-empty line; a bad line is named by its number. A run
// cut off mid-write may end in a partial line: that last line is dropped.
nlohmann::json read_json_lines(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read '{}'", path.string());
  nlohmann::json lines = nlohmann::json::array();
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      if (in.peek() == std::char_traits<char>::eof()) break;  // the partial last line of a killed run
      fail("'{}' line {} is not a JSON object: '{}'", path.string(), number, line.substr(0, 80));
    }
    lines.push_back(std::move(parsed));
  }
  return lines;
}

// A serving run's headline: what was served and how fast it answered.
std::string describe_serving(const nlohmann::json& run) {
  const nlohmann::json& s = run["summary"];
  const size_t windows = run["serving"].size();
  if (!s.is_object())
    return fmt::format("serving, {} windows of serve.jsonl (no serve.json: the server did not stop cleanly)\n", windows);
  const auto ms = [&](const char* key) {
    return s.contains(key) && s[key].is_number() ? fmt::format("{:.1f} ms", 1e3 * s[key].get<double>()) : std::string("-");
  };
  return fmt::format("serving at tp {} ({} scheduling), {} requests and {} generated tokens in {:.1f} s, {} "
                     "preemptions\n  latency      TTFT p50 {}, p99 {}; inter-token p50 {}, p99 {}\n",
                     s.value("tp", 1), s.value("scheduler", std::string("?")), s.value("requests", 0),
                     s.value("generated_tokens", 0), s.value("seconds", 0.0), s.value("preemptions", 0), ms("ttft_p50_s"),
                     ms("ttft_p99_s"), ms("itl_p50_s"), ms("itl_p99_s"));
}

}  // namespace

nlohmann::json read_run_directory(const std::string& dir, const std::string& html_dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) fail("run directory '{}' does not exist (give parallax train --run-dir DIR)", dir);
  const fs::path metrics = root / "metrics.jsonl";
  std::string name = fs::absolute(root).lexically_normal().filename().string();
  if (name.empty()) name = fs::absolute(root).lexically_normal().parent_path().filename().string();
  if (fs::exists(root / "serve.jsonl") && !fs::exists(metrics)) {  // a serving run (serve/run_log.h)
    return {{"name", name},
            {"dir", dir},
            {"kind", "serve"},
            {"serving", read_json_lines(root / "serve.jsonl")},
            {"summary", fs::exists(root / "serve.json") ? read_json_file(root / "serve.json") : nlohmann::json()}};
  }
  if (!fs::exists(metrics))
    fail("'{}' holds no metrics.jsonl or serve.jsonl: expected a directory written by `parallax train --run-dir {}` "
         "or `parallax serve --run-dir {}`",
         dir, dir, dir);

  nlohmann::json run{{"name", name}, {"dir", dir}, {"metrics", read_json_lines(metrics)}};
  run["summary"] = fs::exists(root / "run.json") ? read_json_file(root / "run.json") : nlohmann::json();
  run["plan"] = fs::exists(root / "plan.json") ? read_json_file(root / "plan.json") : nlohmann::json();
  run["trace_href"] = nullptr;
  run["trace_summary"] = nullptr;
  run["measured_timeline"] = nullptr;
  if (const fs::path trace_path = root / "trace.json"; fs::exists(trace_path)) {
    const nlohmann::json trace = read_json_file(trace_path);
    run["trace_href"] = fs::relative(fs::absolute(trace_path), fs::absolute(html_dir)).generic_string();
    run["trace_summary"] = to_json(split_time_per_rank(trace, trace_path.string()));
    const StepTimeline timeline = last_step_timeline(trace, trace_path.string());
    if (timeline.step >= 0) run["measured_timeline"] = to_json(timeline);
  }
  return run;
}

std::string describe_run(const nlohmann::json& run) {
  const nlohmann::json& summary = run["summary"];
  std::string text = fmt::format("{}: ", run.value("name", std::string()));
  if (run.value("kind", std::string()) == "serve") return text + describe_serving(run);
  if (!summary.is_object())
    return text + "no run.json (the run did not end, or was not given --run-dir): curves only\n";
  auto number = [](const nlohmann::json& j, const char* key) {
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
  };
  auto error = [](double predicted, double measured) {
    return measured > 0 && predicted > 0 ? fmt::format(" ({:+.1f}%)", 100 * (predicted / measured - 1)) : std::string();
  };
  const nlohmann::json strategy = summary.value("strategy_summary", nlohmann::json::object());
  text += fmt::format("{} on {} rank(s) (mesh {}), {} steps in {:.1f} s\n",
                      strategy.value("description", std::string("?")), summary.value("ranks", 1),
                      summary.value("mesh", std::string("?")), summary.value("steps", 0), number(summary, "seconds"));
  if (const nlohmann::json& plan = run["plan"]; plan.is_object() && plan.contains("chosen"))
    text += fmt::format("  plan         chose {} ({} search on '{}'): {}\n",
                        plan["chosen"].value("description", std::string("?")), plan.value("method", std::string("?")),
                        plan.value("cluster", std::string("?")), plan.value("why", std::string()));
  const double measured = number(summary, "measured_step_s"), predicted = number(summary, "predicted_step_s");
  text += fmt::format("  step time    predicted {:.4f} s, measured {:.4f} s{}\n", predicted, measured,
                      error(predicted, measured));
  const nlohmann::json memory = summary.value("memory", nlohmann::json::object());
  const auto measured_peaks = memory.value("measured_peak_bytes", std::vector<double>());
  const auto predicted_peaks = memory.value("predicted_peak_bytes", std::vector<double>());
  for (size_t r = 0; r < measured_peaks.size(); ++r) {
    const double p = r < predicted_peaks.size() ? predicted_peaks[r] : 0;
    text += fmt::format("  rank {} peak  predicted {:.1f} MiB, measured {:.1f} MiB{}\n", r, p / (1 << 20),
                        measured_peaks[r] / (1 << 20), error(p, measured_peaks[r]));
  }
  return text;
}

}  // namespace px::report
