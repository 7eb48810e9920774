#include "report/html_report.h"

#include <chrono>
#include <filesystem>

#include <fmt/chrono.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "report/run_directory.h"
#include "core/atomic_file.h"

namespace px::report {
namespace {

// Text placed inside <script> or <title> must not close it early: "</"
// becomes "<\/" (the same string to JSON and to JavaScript).
std::string escape_for_script(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') out += '\\';
  }
  return out;
}

std::string escape_html(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string render_report(const std::vector<nlohmann::json>& runs, const std::string& generated_at) {
  std::string names;
  for (const nlohmann::json& run : runs) names += (names.empty() ? "" : ", ") + run.value("name", std::string("?"));
  const nlohmann::json data{{"generated_at", generated_at}, {"runs", runs}};
  return fmt::format(
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>parallax report: {}</title>\n<style>\n{}\n</style></head>\n"
      "<body><div id=\"app\"></div>\n"
      "<script id=\"px-data\" type=\"application/json\">{}</script>\n"
      "<script>\n{}\n</script></body></html>\n",
      escape_html(names), report_style(), escape_for_script(data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)),
      report_script());
}

std::vector<std::string> write_report(const std::vector<std::string>& run_dirs, const std::string& out) {
  if (run_dirs.empty()) fail("parallax report: give at least one run directory");
  namespace fs = std::filesystem;
  const fs::path html_dir = fs::absolute(out).parent_path();
  std::vector<nlohmann::json> runs;
  for (const std::string& dir : run_dirs) runs.push_back(read_run_directory(dir, html_dir.string()));
  const auto now = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
  write_file_atomically(out, render_report(runs, fmt::format("{:%Y-%m-%d %H:%M:%S} UTC", now)));
  std::vector<std::string> headlines;
  for (const nlohmann::json& run : runs) headlines.push_back(describe_run(run));
  return headlines;
}

}  // namespace px::report
