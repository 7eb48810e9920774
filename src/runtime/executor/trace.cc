#include "runtime/executor/trace.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"

namespace px {
namespace {

nlohmann::json events_of(int rank, const std::vector<TraceRecord>& records) {
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
  return events;
}

}  // namespace

void write_chrome_trace(const std::string& path, const std::vector<std::vector<TraceRecord>>& per_rank) {
  nlohmann::json all = nlohmann::json::array();
  for (size_t r = 0; r < per_rank.size(); ++r)
    for (auto& e : events_of(static_cast<int>(r), per_rank[r])) all.push_back(std::move(e));
  write_file_atomically(path, "{\"traceEvents\":" + all.dump() + ",\"displayTimeUnit\":\"ms\"}\n");
}

void write_chrome_trace(const std::string& path, comm::Communicator* group, const std::vector<TraceRecord>& mine) {
  const int rank = group ? group->rank() : 0, size = group ? group->size() : 1;
  std::string text = events_of(rank, mine).dump();
  if (size == 1) {
    write_file_atomically(path, "{\"traceEvents\":" + text + ",\"displayTimeUnit\":\"ms\"}\n");
    return;
  }
  // Rank r > 0 sends its events' length, then the text, to rank 0.
  const uint32_t tag = group->next_tag();
  const comm::Step step{"trace gather", 0};
  if (rank != 0) {
    int64_t length = static_cast<int64_t>(text.size());
    comm::Request r = group->isend(0, tag, &length, sizeof length);
    group->wait(r, step);
    r = group->isend(0, tag, text.data(), text.size());
    group->wait(r, step);
    return;
  }
  nlohmann::json all = nlohmann::json::parse(text);
  for (int peer = 1; peer < size; ++peer) {
    int64_t length = 0;
    comm::Request r = group->irecv(peer, tag, &length, sizeof length);
    group->wait(r, step);
    std::string theirs(static_cast<size_t>(length), '\0');
    r = group->irecv(peer, tag, theirs.data(), theirs.size());
    group->wait(r, step);
    for (auto& e : nlohmann::json::parse(theirs)) all.push_back(std::move(e));
  }
  write_file_atomically(path, "{\"traceEvents\":" + all.dump() + ",\"displayTimeUnit\":\"ms\"}\n");
}

}  // namespace px
