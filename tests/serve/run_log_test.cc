// The serving run log (serve/run_log.h): one line a window with the
// gauges, the counters' change and the window's exact latencies, and the
// whole run's summary when it stops.
#include "serve/run_log.h"

#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "core/error.h"
#include "testing/scratch_dir.h"

namespace px::serve {
namespace {

TEST(ServeRunLog, EachWindowHoldsItsChangesAndTheSummaryTheWholeRun) {
  testing::ScratchDir dir;
  ServeMetrics metrics;
  {
    ServeRunLog log(dir.path() + "/serving", metrics, {{"tp", 1}}, std::chrono::milliseconds(40));
    metrics.running = 3;
    metrics.iterations += 4;
    metrics.iteration_rows += 10;
    metrics.generated_tokens += 8;
    metrics.finished_length += 2;
    for (double s : {0.01, 0.03}) metrics.recent_ttft.add(s);
    metrics.recent_itl.add(0.002);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    metrics.running = 0;
    metrics.generated_tokens += 2;
  }
  std::ifstream lines(dir.path() + "/serving/serve.jsonl");
  std::vector<nlohmann::json> windows;
  for (std::string line; std::getline(lines, line);) windows.push_back(nlohmann::json::parse(line));
  ASSERT_GE(windows.size(), 3u);
  EXPECT_EQ(windows.front()["running"], 3);
  EXPECT_EQ(windows.front()["iterations"], 4);
  EXPECT_DOUBLE_EQ(windows.front()["batch_rows"].get<double>(), 2.5);
  EXPECT_EQ(windows.front()["finished"], 2);
  EXPECT_DOUBLE_EQ(windows.front()["ttft_p99_s"].get<double>(), 0.03);
  EXPECT_TRUE(windows[1]["ttft_p50_s"].is_null());  // no first token in that window
  EXPECT_TRUE(windows[1]["batch_rows"].is_null());  // nor an iteration
  EXPECT_EQ(windows.back()["running"], 0);
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(dir.path() + "/serving/serve.json"));
  EXPECT_EQ(summary["kind"], "serve");
  EXPECT_EQ(summary["tp"], 1);
  EXPECT_EQ(summary["generated_tokens"], 10);
  EXPECT_EQ(summary["requests"], 2);
  EXPECT_DOUBLE_EQ(summary["itl_p50_s"].get<double>(), 0.002);
}

TEST(ServeRunLog, AnUnwritableDirectoryIsNamed) {
  testing::ScratchDir dir;
  std::ofstream(dir.path() + "/file") << "x";
  ServeMetrics metrics;
  try {
    ServeRunLog log(dir.path() + "/file/serving", metrics, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--run-dir"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace px::serve
