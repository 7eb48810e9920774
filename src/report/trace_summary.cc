#include "report/trace_summary.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace px::report {
namespace {

struct Event {
  int rank = 0;
  bool comm = false;
  long step = 0;
  double start_us = 0, duration_us = 0;
  std::string name;
  int instr = -1;
};

// The complete ("X") events of a trace written by runtime/trace.cc.
std::vector<Event> events_of(const nlohmann::json& trace, const std::string& path) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    fail("trace '{}' has no \"traceEvents\" array: expected a Chrome trace written by parallax train --trace", path);
  std::vector<Event> events;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    auto number = [&](const char* key) -> double {
      if (!e.contains(key) || !e[key].is_number())
        fail("trace '{}': an event ({}) has no number \"{}\"", path, e.dump().substr(0, 120), key);
      return e[key].get<double>();
    };
    Event out{.rank = static_cast<int>(number("pid")),
              .comm = number("tid") != 0,
              .start_us = number("ts"),
              .duration_us = number("dur"),
              .name = e.value("name", "")};
    if (out.rank < 0 || out.rank > (1 << 20))
      fail("trace '{}': an event's pid {} is not a rank", path, out.rank);
    if (const auto args = e.find("args"); args != e.end() && args->is_object()) {
      if (args->contains("step") && (*args)["step"].is_number_integer()) out.step = (*args)["step"].get<long>();
      if (args->contains("instr") && (*args)["instr"].is_number_integer()) out.instr = (*args)["instr"].get<int>();
    }
    events.push_back(std::move(out));
  }
  return events;
}

using Interval = std::pair<double, double>;

// The measure of a union of intervals.
double covered(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, begin = 0, end = 0;
  bool open = false;
  for (const auto& [b, e] : intervals) {
    if (open && b <= end) {
      end = std::max(end, e);
      continue;
    }
    if (open) total += end - begin;
    begin = b, end = e, open = true;
  }
  if (open) total += end - begin;
  return total;
}

}  // namespace

std::vector<RankTimeSplit> split_time_per_rank(const nlohmann::json& trace, const std::string& path) {
  // (rank, step) -> its compute and comm intervals
  std::map<std::pair<int, long>, std::pair<std::vector<Interval>, std::vector<Interval>>> steps;
  for (const Event& e : events_of(trace, path)) {
    auto& [compute, comm] = steps[{e.rank, e.step}];
    (e.comm ? comm : compute).push_back({e.start_us, e.start_us + e.duration_us});
  }
  std::map<int, RankTimeSplit> ranks;
  for (const auto& [key, lanes] : steps) {
    const auto& [compute, comm] = lanes;
    std::vector<Interval> all = compute;
    all.insert(all.end(), comm.begin(), comm.end());
    double first = all.front().first, last = all.front().second;
    for (const auto& [b, e] : all) first = std::min(first, b), last = std::max(last, e);
    const double compute_us = covered(compute), comm_us = covered(comm), busy_us = covered(all);
    RankTimeSplit& r = ranks[key.first];
    r.rank = key.first;
    r.steps += 1;
    r.span_s += (last - first) / 1e6;
    r.compute_s += compute_us / 1e6;
    r.comm_s += comm_us / 1e6;
    r.comm_overlapped_s += (compute_us + comm_us - busy_us) / 1e6;
    r.idle_s += (last - first - busy_us) / 1e6;
  }
  std::vector<RankTimeSplit> out;
  for (auto& [rank, split] : ranks) out.push_back(split);
  return out;
}

StepTimeline last_step_timeline(const nlohmann::json& trace, const std::string& path) {
  std::vector<Event> events = events_of(trace, path);
  StepTimeline timeline;
  int ranks = 0;
  for (const Event& e : events) timeline.step = std::max(timeline.step, e.step), ranks = std::max(ranks, e.rank + 1);
  std::erase_if(events, [&](const Event& e) { return e.step != timeline.step; });
  if (events.empty()) return timeline;
  double first = events.front().start_us, last = first;
  for (const Event& e : events) first = std::min(first, e.start_us), last = std::max(last, e.start_us + e.duration_us);
  timeline.span_s = (last - first) / 1e6;
  timeline.ranks.resize(static_cast<size_t>(ranks));
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.start_us < b.start_us; });
  for (Event& e : events)
    timeline.ranks[static_cast<size_t>(e.rank)].push_back({.lane = e.comm ? "comm" : "compute",
                                                           .name = std::move(e.name),
                                                           .start_s = (e.start_us - first) / 1e6,
                                                           .duration_s = e.duration_us / 1e6,
                                                           .instr = e.instr});
  return timeline;
}

nlohmann::json to_json(const std::vector<RankTimeSplit>& splits) {
  nlohmann::json out = nlohmann::json::array();
  for (const RankTimeSplit& s : splits)
    out.push_back({{"rank", s.rank},
                   {"steps", s.steps},
                   {"span_s", s.span_s},
                   {"compute_s", s.compute_s},
                   {"comm_s", s.comm_s},
                   {"comm_overlapped_s", s.comm_overlapped_s},
                   {"idle_s", s.idle_s}});
  return out;
}

nlohmann::json to_json(const StepTimeline& timeline) {
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    nlohmann::json events = nlohmann::json::array();
    for (const TimelineEvent& e : timeline.ranks[r])
      events.push_back({{"lane", e.lane}, {"name", e.name}, {"start", e.start_s}, {"dur", e.duration_s},
                        {"instr", e.instr}});
    ranks.push_back({{"rank", r}, {"events", std::move(events)}});
  }
  return {{"step", timeline.step}, {"step_s", timeline.span_s}, {"ranks", std::move(ranks)}};
}

}  // namespace px::report
