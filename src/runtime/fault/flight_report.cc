#include "runtime/fault/flight_report.h"

#include <limits>

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace px {

std::vector<FlightDump> read_flight_records(const std::string& run_dir) {
  const std::filesystem::path dir = std::filesystem::path(run_dir) / "flight";
  if (!std::filesystem::is_directory(dir))
    fail("'{}' holds no flight records: expected the directory '{}' (give `parallax train` --run-dir)", run_dir,
         dir.string());
  std::vector<FlightDump> out;
  for (int r = 0;; ++r) {
    const std::string path = flight_path(run_dir, r);
    if (!std::filesystem::exists(path)) {
      // Files are rank0 .. rank<world-1>; the first record says how many.
      if (!out.empty() && r >= out.front().world) break;
      if (out.empty() && r > 4096) break;
      continue;
    }
    if (std::optional<FlightDump> d = FlightRecorder::read_file(path)) out.push_back(std::move(*d));
  }
  if (out.empty()) fail("'{}' holds no readable flight record", dir.string());
  return out;
}

std::vector<FlightDump> read_flight_records(const std::vector<std::string>& run_dirs) {
  std::map<int, std::pair<FlightDump, std::string>> by_rank;
  for (const std::string& dir : run_dirs)
    for (FlightDump& d : read_flight_records(dir)) {
      if (auto it = by_rank.find(d.rank); it != by_rank.end())
        fail("rank {}'s flight record is in both '{}' and '{}': give each host's run directory once", d.rank,
             it->second.second, dir);
      const int rank = d.rank;
      by_rank.emplace(rank, std::make_pair(std::move(d), dir));
    }
  std::vector<FlightDump> out;
  for (auto& [rank, found] : by_rank) out.push_back(std::move(found.first));
  return out;
}

namespace {

bool reported(const FlightDump& d) { return d.phase == RankPhase::failed || d.phase == RankPhase::finished; }

std::string event_text(const FlightEvent& e) {
  std::string text = fmt::format("{} on {} ({} {}, {} bytes", e.name, e.axis,
                                 e.kind == FlightKind::send || e.kind == FlightKind::recv ? "tag" : "sequence",
                                 e.sequence, e.bytes);
  if (e.peer >= 0) text += fmt::format(", peer rank {}", e.peer);
  return text + fmt::format(") at step {}, instruction #{}", e.step, e.instr);
}

// The rank that fell behind: the one the others' watchdogs declared silent,
// if they did (most named; among as many, the one its accusers last heard
// first: a rank stalled behind the culprit can be named too, by a rank
// waiting on it); else silent ranks first (no error of their own), then
// the furthest back.
struct Behind {
  const FlightDump* dump = nullptr;
  std::map<int, std::vector<int>> named_by;  // suspect -> ranks that declared it
  int64_t heard_ns = 0;                      // its last heartbeat as they saw it (the earliest)
};

Behind find_behind(const std::vector<FlightDump>& ranks) {
  Behind out;
  for (const FlightDump& d : ranks)
    if (d.suspect >= 0 && d.suspect != d.rank) out.named_by[d.suspect].push_back(d.rank);
  if (!out.named_by.empty()) {
    // When its accusers last heard the suspect (the earliest of them; its
    // own record may beat again after a SIGCONT).
    auto last_heard = [&](int suspect) {
      int64_t earliest = std::numeric_limits<int64_t>::max();
      for (const FlightDump& d : ranks)
        if (d.suspect == suspect && d.suspect_heard_ns > 0) earliest = std::min(earliest, d.suspect_heard_ns);
      return earliest;
    };
    const auto most = std::max_element(out.named_by.begin(), out.named_by.end(), [&](const auto& a, const auto& b) {
      if (a.second.size() != b.second.size()) return a.second.size() < b.second.size();
      return last_heard(a.first) > last_heard(b.first);  // heard later: less silent
    });
    for (const FlightDump& d : ranks) {
      if (d.rank == most->first) out.dump = &d;
      if (d.suspect == most->first && d.suspect_heard_ns > 0 &&
          (out.heard_ns == 0 || d.suspect_heard_ns < out.heard_ns))
        out.heard_ns = d.suspect_heard_ns;
    }
  }
  if (out.dump == nullptr)
    for (const FlightDump& d : ranks) {
      if (out.dump == nullptr) {
        out.dump = &d;
        continue;
      }
      // Within a step, the one at an earlier instruction (-1: between steps) is behind.
      auto key = [](const FlightDump& x) { return std::make_tuple(reported(x), x.step, x.instr, x.heartbeat_ns); };
      if (key(d) < key(*out.dump)) out.dump = &d;
    }
  return out;
}

// What every other rank waits for, beside the behind rank's latest
// sequence number in the same group.
std::string describe_waits(const std::vector<FlightDump>& ranks, const FlightDump& behind) {
  std::string r;
  for (const FlightDump& d : ranks) {
    if (&d == &behind) continue;
    bool waiting = false;
    for (const FlightEvent& e : d.events) {
      if (e.state != FlightState::posted && e.state != FlightState::failed) continue;
      waiting = true;
      std::string theirs = "it never posted one on that axis";
      for (auto it = behind.events.rbegin(); it != behind.events.rend(); ++it)
        if (it->axis == e.axis && it->kind == e.kind) {
          theirs = fmt::format("its latest there: {} {}", it->sequence, flight_state_name(it->state));
          break;
        }
      r += fmt::format("rank {} waits for {} ({}; rank {}: {})\n", d.rank, event_text(e),
                       flight_state_name(e.state), behind.rank, theirs);
    }
    if (!waiting) r += fmt::format("rank {} waits on no collective or transfer\n", d.rank);
  }
  return r;
}

}  // namespace

FlightDiagnosis diagnose(const std::vector<FlightDump>& ranks, int64_t now_ns) {
  FlightDiagnosis out;
  auto age_s = [now_ns](int64_t ns) { return ns > 0 ? double(now_ns - ns) / 1e9 : -1.0; };
  std::string& r = out.report;
  r += fmt::format("{} flight records (world of {})\n", ranks.size(), ranks.empty() ? 0 : ranks.front().world);
  for (const FlightDump& d : ranks) {
    r += fmt::format("rank {} (pid {}): {}, at {}; last heartbeat {:.1f} s ago\n", d.rank, d.pid,
                     rank_phase_name(d.phase), describe_position(d.step, d.instr, d.instr_name),
                     age_s(d.heartbeat_ns));
    if (!d.error.empty()) r += fmt::format("  error: {}\n", d.error);
  }
  Behind found = find_behind(ranks);
  if (found.dump == nullptr) return out;
  const FlightDump& behind = *found.dump;
  out.behind = behind.rank;
  out.last_heard_ns = found.heard_ns > 0 ? found.heard_ns : behind.heartbeat_ns;
  const std::string named =
      found.named_by.count(behind.rank) ? fmt::format(", declared silent by rank{} {}",
                                                      found.named_by[behind.rank].size() == 1 ? "" : "s",
                                                      fmt::join(found.named_by[behind.rank], ", "))
                                        : "";
  r += fmt::format("\nrank {} fell behind: {}{}{}, at {}; its heartbeat stopped {:.1f} s ago\n", behind.rank,
                   rank_phase_name(behind.phase),
                   reported(behind) ? "" : " without reporting an error (killed, stopped or hung)", named,
                   describe_position(behind.step, behind.instr, behind.instr_name), age_s(out.last_heard_ns));
  const size_t last = std::min<size_t>(behind.events.size(), 3);
  for (size_t i = behind.events.size() - last; i < behind.events.size(); ++i) {
    const FlightEvent& e = behind.events[i];
    r += fmt::format("  its {} event: {}, {}\n", i + 1 == behind.events.size() ? "last" : "earlier", event_text(e),
                     flight_state_name(e.state));
  }
  r += describe_waits(ranks, behind);
  return out;
}

std::string archive_flight_records(const std::string& run_dir, int attempt) {
  namespace fs = std::filesystem;
  if (run_dir.empty() || !fs::is_directory(run_dir + "/flight")) return {};
  const std::string to = fmt::format("{}/attempt-{}", run_dir, attempt);
  std::error_code ec;
  fs::remove_all(to, ec);
  fs::create_directories(to);
  fs::rename(run_dir + "/flight", to + "/flight");
  return to;
}

}  // namespace px
