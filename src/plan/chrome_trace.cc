#include "plan/chrome_trace.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"

namespace px {

std::string chrome_trace_events(int rank, const std::vector<TraceRecord>& records) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", fmt::format("rank {}", rank)}}}});
  events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "compute"}}}});
  events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", 1}, {"args", {{"name", "comm"}}}});
  events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", 2}, {"args", {{"name", "progress"}}}});
  for (const TraceRecord& r : records) {
    nlohmann::json e{{"ph", "X"},
                     {"name", r.name},
                     {"cat", r.lane == TraceRecord::Lane::compute ? "compute" : "comm"},
                     {"pid", rank},
                     {"tid", static_cast<int>(r.lane)},
                     {"ts", r.start_us},
                     {"dur", r.duration_us},
                     {"args", {{"step", r.step}}}};
    if (r.lane != TraceRecord::Lane::compute) e["args"]["bytes"] = r.bytes;
    if (r.instr >= 0) e["args"]["instr"] = r.instr;
    events.push_back(std::move(e));
  }
  return events.dump();
}

void write_chrome_trace_file(const std::string& path, const std::vector<std::string>& events_per_rank) {
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& events : events_per_rank)
    for (auto& e : nlohmann::json::parse(events)) all.push_back(std::move(e));
  write_file_atomically(path, "{\"traceEvents\":" + all.dump() + ",\"displayTimeUnit\":\"ms\"}\n");
}

void write_chrome_trace(const std::string& path, const std::vector<std::vector<TraceRecord>>& per_rank) {
  std::vector<std::string> events;
  for (size_t r = 0; r < per_rank.size(); ++r) events.push_back(chrome_trace_events(static_cast<int>(r), per_rank[r]));
  write_chrome_trace_file(path, events);
}

namespace plan {

void write_simulated_trace(const std::string& path, const Simulation& sim, int ranks) {
  std::vector<std::vector<TraceRecord>> per_rank(static_cast<size_t>(ranks));
  for (const SimulatedEvent& e : sim.trace)
    per_rank[static_cast<size_t>(e.rank)].push_back(
        {.name = e.name,
         .lane = e.lane == "compute"                ? TraceRecord::Lane::compute
                 : e.lane.starts_with("progress:") ? TraceRecord::Lane::progress
                                                   : TraceRecord::Lane::comm,
         .start_us = e.start * 1e6,
         .duration_us = e.duration * 1e6,
         .bytes = 0,
         .step = 0,
         .instr = e.instr});
  write_chrome_trace(path, per_rank);
}

}  // namespace plan
}  // namespace px
