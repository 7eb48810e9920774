// A run directory read back for the report, and the page made from it.
#include "report/run_directory.h"

#include <fstream>

#include <gtest/gtest.h>

#include "core/error.h"
#include "report/html_report.h"
#include "testing/scratch_dir.h"

namespace px::report {
namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(RunDirectory, ReadsMetricsSummaryTraceAndPlanWithTheTraceLinkedFromTheReport) {
  testing::ScratchDir dir;
  const std::string run = dir.path() + "/runs/gpt-mini";
  std::filesystem::create_directories(run);
  write(run + "/metrics.jsonl",
        "{\"step\":1,\"train_loss\":5.5,\"time_s\":0.1}\n{\"step\":2,\"train_loss\":5.0,\"time_s\":0.2}\n"
        "{\"step\":2,\"val_loss\":5.1,\"time_s\":0.3}\n");
  write(run + "/run.json", "{\"model\":\"gpt\",\"ranks\":2}");
  write(run + "/plan.json", "{\"method\":\"grid\"}");
  write(run + "/trace.json",
        "{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"a\",\"pid\":1,\"tid\":0,\"ts\":5,\"dur\":5,\"args\":{\"step\":2}}]}");
  const nlohmann::json read = read_run_directory(run, dir.path());
  EXPECT_EQ(read["name"], "gpt-mini");
  EXPECT_EQ(read["metrics"].size(), 3u);
  EXPECT_EQ(read["summary"]["ranks"], 2);
  EXPECT_EQ(read["plan"]["method"], "grid");
  EXPECT_EQ(read["trace_href"], "runs/gpt-mini/trace.json");
  ASSERT_EQ(read["trace_summary"].size(), 1u);  // only rank 1 has events
  EXPECT_EQ(read["trace_summary"][0]["rank"], 1);
  EXPECT_EQ(read["measured_timeline"]["step"], 2);
}

TEST(RunDirectory, ARunCutOffMidLineKeepsItsWholeLinesAndABadLineInTheMiddleIsNamed) {
  testing::ScratchDir dir;
  write(dir.path() + "/metrics.jsonl", "{\"step\":1,\"train_loss\":5.5}\n{\"step\":2,\"train_lo");
  const nlohmann::json read = read_run_directory(dir.path(), dir.path());
  EXPECT_EQ(read["metrics"].size(), 1u);
  EXPECT_TRUE(read["summary"].is_null());
  EXPECT_TRUE(read["trace_href"].is_null());
  EXPECT_NE(describe_run(read).find("no run.json"), std::string::npos);

  write(dir.path() + "/metrics.jsonl", "{\"step\":1}\nnot json\n{\"step\":3}\n");
  try {
    read_run_directory(dir.path(), dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

TEST(RunDirectory, ADirectoryWithoutMetricsNamesTheFlagThatWritesThem) {
  testing::ScratchDir dir;
  try {
    read_run_directory(dir.path(), dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--run-dir"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_run_directory(dir.path() + "/absent", dir.path()), Error);
}

TEST(RunDirectory, AServingRunIsReadFromServeJsonlAndDescribedByItsLatency) {
  testing::ScratchDir dir;
  write(dir.path() + "/serve.jsonl",
        "{\"time_s\":0.5,\"running\":3,\"waiting\":1}\n{\"time_s\":1.0,\"running\":0,\"waiting\":0}\n");
  nlohmann::json read = read_run_directory(dir.path(), dir.path());
  EXPECT_EQ(read["kind"], "serve");
  EXPECT_EQ(read["serving"].size(), 2u);
  EXPECT_NE(describe_run(read).find("did not stop cleanly"), std::string::npos) << describe_run(read);
  write(dir.path() + "/serve.json",
        "{\"tp\":2,\"scheduler\":\"iteration\",\"requests\":7,\"generated_tokens\":90,\"seconds\":1.5,"
        "\"preemptions\":1,\"ttft_p50_s\":0.0125,\"ttft_p99_s\":0.05,\"itl_p50_s\":0.002,\"itl_p99_s\":null}");
  read = read_run_directory(dir.path(), dir.path());
  const std::string text = describe_run(read);
  EXPECT_NE(text.find("serving at tp 2 (iteration scheduling), 7 requests and 90 generated tokens"), std::string::npos)
      << text;
  EXPECT_NE(text.find("TTFT p50 12.5 ms, p99 50.0 ms; inter-token p50 2.0 ms, p99 -"), std::string::npos) << text;
}

TEST(HtmlReport, EmbedsTheDataWhereAScriptCannotBeClosedByIt) {
  const nlohmann::json run{{"name", "a</script><b>"}, {"metrics", {{{"note", "</script>"}}}}};
  const std::string page = render_report({run}, "now");
  // One closing tag per script element (data and code) and none from the data.
  size_t closings = 0;
  for (size_t at = page.find("</script>"); at != std::string::npos; at = page.find("</script>", at + 1)) ++closings;
  EXPECT_EQ(closings, 2u);
  EXPECT_NE(page.find("<title>parallax report: a&lt;/script&gt;&lt;b&gt;</title>"), std::string::npos);
  EXPECT_NE(page.find(std::string(report_script()).substr(0, 200)), std::string::npos);
  EXPECT_NE(page.find(std::string(report_style()).substr(0, 100)), std::string::npos);
}

}  // namespace
}  // namespace px::report
