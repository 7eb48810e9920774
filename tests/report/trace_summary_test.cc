// The report's reading of a Chrome trace: time split per rank into
// computing, communicating and idle, and one step's timeline.
#include "report/trace_summary.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace px::report {
namespace {

// An "X" event as runtime/executor/trace.cc writes it (times in µs).
nlohmann::json event(int rank, int lane, double start_us, double duration_us, long step, int instr = -1) {
  nlohmann::json e{{"ph", "X"}, {"name", lane == 0 ? "matmul" : "allreduce"}, {"pid", rank}, {"tid", lane},
                   {"ts", start_us}, {"dur", duration_us}, {"args", {{"step", step}}}};
  if (instr >= 0) e["args"]["instr"] = instr;
  return e;
}

nlohmann::json trace_of(std::vector<nlohmann::json> events) {
  nlohmann::json all = nlohmann::json::array();
  all.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", {{"name", "rank 0"}}}});
  for (auto& e : events) all.push_back(std::move(e));
  return {{"traceEvents", all}};
}

TEST(TraceSummary, SplitsEachRanksSpanIntoComputeCommunicationAndIdle) {
  // Rank 0, step 1: compute [0,40) and [60,100), comm [30,70): 10 µs of it
  // under compute at each end, 20 µs alone; the span 100 µs, idle 0.
  // Rank 1, step 1: compute [0,10), comm [50,60): idle 40 µs of a 60 µs span.
  const nlohmann::json trace = trace_of({event(0, 0, 0, 40, 1), event(0, 0, 60, 40, 1), event(0, 1, 30, 40, 1),
                                         event(1, 0, 0, 10, 1), event(1, 1, 50, 10, 1)});
  const std::vector<RankTimeSplit> splits = split_time_per_rank(trace, "t.json");
  ASSERT_EQ(splits.size(), 2u);
  EXPECT_EQ(splits[0].steps, 1);
  EXPECT_NEAR(splits[0].span_s, 100e-6, 1e-12);
  EXPECT_NEAR(splits[0].compute_s, 80e-6, 1e-12);
  EXPECT_NEAR(splits[0].comm_s, 40e-6, 1e-12);
  EXPECT_NEAR(splits[0].comm_overlapped_s, 20e-6, 1e-12);
  EXPECT_NEAR(splits[0].idle_s, 0, 1e-12);
  EXPECT_NEAR(splits[1].span_s, 60e-6, 1e-12);
  EXPECT_NEAR(splits[1].idle_s, 40e-6, 1e-12);
  EXPECT_NEAR(splits[1].comm_overlapped_s, 0, 1e-12);
}

TEST(TraceSummary, SumsOverStepsAndLeavesTheGapBetweenStepsOut) {
  // Two steps of 10 µs each, 1000 µs apart: the span is 20 µs, not 1010.
  const nlohmann::json trace = trace_of({event(0, 0, 0, 10, 2), event(0, 0, 1000, 10, 3)});
  const std::vector<RankTimeSplit> splits = split_time_per_rank(trace, "t.json");
  ASSERT_EQ(splits.size(), 1u);
  EXPECT_EQ(splits[0].steps, 2);
  EXPECT_NEAR(splits[0].span_s, 20e-6, 1e-12);
  EXPECT_NEAR(splits[0].idle_s, 0, 1e-12);
}

TEST(TraceSummary, TheLastStepsTimelineStartsAtItsEarliestEventOnAnyRank) {
  const nlohmann::json trace = trace_of({event(0, 0, 0, 10, 2, 5), event(0, 0, 500, 10, 3, 5),
                                         event(1, 1, 490, 30, 3, 9), event(0, 1, 520, 5, 3, 11)});
  const StepTimeline timeline = last_step_timeline(trace, "t.json");
  EXPECT_EQ(timeline.step, 3);
  EXPECT_NEAR(timeline.span_s, 35e-6, 1e-12);
  ASSERT_EQ(timeline.ranks.size(), 2u);
  ASSERT_EQ(timeline.ranks[0].size(), 2u);
  EXPECT_NEAR(timeline.ranks[0][0].start_s, 10e-6, 1e-12);
  EXPECT_EQ(timeline.ranks[0][0].instr, 5);
  EXPECT_EQ(timeline.ranks[0][1].lane, "comm");
  ASSERT_EQ(timeline.ranks[1].size(), 1u);
  EXPECT_NEAR(timeline.ranks[1][0].start_s, 0, 1e-12);
  EXPECT_EQ(timeline.ranks[1][0].instr, 9);
}

TEST(TraceSummary, ANonTraceIsANamedError) {
  try {
    split_time_per_rank(nlohmann::json{{"events", 1}}, "runs/x/trace.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs/x/trace.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("traceEvents"), std::string::npos) << e.what();
  }
  EXPECT_THROW(split_time_per_rank(trace_of({{{"ph", "X"}, {"pid", 0}, {"tid", 0}, {"ts", "soon"}, {"dur", 1}}}),
                                   "t.json"),
               Error);
}

}  // namespace
}  // namespace px::report
