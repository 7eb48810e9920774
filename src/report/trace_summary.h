// What a run's Chrome trace (runtime/executor/trace.h: one process per rank, lane 0
// "compute", lane 1 "comm", each event tagged with its step) says at a
// glance: per rank, how the traced steps' time split between computing,
// communicating while not computing, and waiting; and one step laid out
// per rank, for the report's timeline beside the simulator's prediction.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace px::report {

// One rank over the traced steps (seconds, summed over the steps). A step's
// span runs from the rank's first event of the step to its last; within
// it, `compute` is the union of compute events, `comm` the union of comm
// events, `comm_overlapped` the part of comm under compute, and `idle` what
// neither covers: span = compute + (comm − comm_overlapped) + idle.
struct RankTimeSplit {
  int rank = 0;
  int steps = 0;
  double span_s = 0, compute_s = 0, comm_s = 0, comm_overlapped_s = 0, idle_s = 0;
};

// One event of one step, relative to that step's earliest event on any rank.
struct TimelineEvent {
  std::string lane;  // "compute" or "comm"
  std::string name;
  double start_s = 0, duration_s = 0;
  int instr = -1;
};
struct StepTimeline {
  long step = -1;                                   // -1: nothing was traced
  double span_s = 0;                                // earliest start to latest end over ranks
  std::vector<std::vector<TimelineEvent>> ranks;    // by rank, in start order
};

// px::Error naming the file when the trace is not what write_chrome_trace writes.
std::vector<RankTimeSplit> split_time_per_rank(const nlohmann::json& trace, const std::string& path);
// The last traced step (the warmest).
StepTimeline last_step_timeline(const nlohmann::json& trace, const std::string& path);

nlohmann::json to_json(const std::vector<RankTimeSplit>& splits);
nlohmann::json to_json(const StepTimeline& timeline);

}  // namespace px::report
