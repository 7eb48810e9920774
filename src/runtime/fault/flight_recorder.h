// FlightRecorder: each rank's record of where it is and of its last
// collectives and point-to-point transfers, kept where a crash, kill -9 or
// SIGSTOP cannot take it away: a memory-mapped file per rank in the run
// directory (`<run dir>/flight/rank<R>`), written with plain stores, so the
// page cache holds the latest state whatever happens to the process.
// `parallax doctor RUN_DIR` reads every rank's file and aligns them
// (runtime/fault/flight_report.h). Without a run directory the record lives in
// anonymous memory. Either way the watchdogs read its pulse (heartbeat,
// phase, position) from memory and send it to other processes over the
// transport (runtime/fault/watchdog.h): liveness never reads the files.
//
// The file: a header (rank, world, pid, heartbeat, the step and instruction
// the rank is at, its phase, its error) and a ring of the last `capacity`
// events. An event is one collective, reshard, send or receive: the
// sequence number its group gives it (the n-th collective of that axis,
// equal on every member; a transfer's tag), the step, the instruction, the
// peer, the bytes, when it was posted and done.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace px {

enum class FlightKind : uint8_t { collective, reshard, send, recv };
enum class FlightState : uint8_t { posted, done, failed };
// What the rank is doing. A frozen, killed or lost (killed for good)
// rank (--inject-fault in process) stops its heartbeat, as a stopped or
// dead process would.
enum class RankPhase : uint8_t { starting, running, failed, finished, frozen, killed, lost };

std::string_view flight_state_name(FlightState state);
std::string_view rank_phase_name(RankPhase phase);

// One event as read back (FlightRecorder::read).
struct FlightEvent {
  uint64_t number = 0;  // this rank's n-th event
  uint64_t sequence = 0;
  int64_t step = -1;
  int instr = -1;
  int peer = -1;        // transfers: the other world rank
  uint64_t bytes = 0;
  int64_t posted_ns = 0, done_ns = 0;  // CLOCK_REALTIME
  FlightKind kind = FlightKind::collective;
  FlightState state = FlightState::posted;
  std::string axis, name;
};

// A rank's whole record as read back.
struct FlightDump {
  int rank = -1, world = 0;
  int64_t pid = 0;
  uint64_t heartbeat = 0;
  int64_t heartbeat_ns = 0;  // CLOCK_REALTIME of the last beat
  int64_t step = -1;
  int instr = -1;
  std::string instr_name;
  int64_t instr_ns = 0;  // when it started the instruction
  RankPhase phase = RankPhase::starting;
  std::string error;
  // The rank this one's watchdog declared silent (-1: none), and when that
  // rank's heartbeat last moved as the watchdog saw it (CLOCK_REALTIME). A
  // stopped process may be continued (mpirun sends SIGCONT before it ends
  // a job) and beat again, so the doctor trusts the others' verdict.
  int suspect = -1;
  int64_t suspect_heard_ns = 0;
  std::vector<FlightEvent> events;  // oldest first
};

class FlightRecorder {
 public:
  static constexpr size_t kDefaultCapacity = 512;

  // path empty: anonymous memory. Otherwise creates (truncates) the file.
  FlightRecorder(const std::string& path, int rank, int world, size_t capacity = kDefaultCapacity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // The rank is at instruction `instr` (named `name`) of step `step`.
  void at(int64_t step, int instr, std::string_view name);
  // Records an event; returns its number for done().
  uint64_t post(FlightKind kind, std::string_view axis, uint64_t sequence, int64_t step, int instr,
                std::string_view name, uint64_t bytes, int peer = -1);
  void done(uint64_t number, bool ok = true);
  void set_phase(RankPhase phase);
  RankPhase phase() const;
  // The error that stopped the rank (kept in the header, cut at 1 KiB).
  void set_error(std::string_view what);
  // This rank's watchdog declared `rank` silent; its heartbeat last moved at `last_heard_ns`.
  void set_suspect(int rank, int64_t last_heard_ns);
  // The watchdog's beat (watchdog.h).
  void beat();
  uint64_t heartbeat() const;
  FlightDump read() const;
  const std::string& path() const { return path_; }
  int rank() const;  // the rank it records

  // A rank's file as it is now (another process may still write it).
  // std::nullopt if it does not exist yet; px::Error if it is not a record.
  // `events` false: the header's position and pulse only, not the ring.
  static std::optional<FlightDump> read_file(const std::string& path, bool events = true);
  // Just its heartbeat, phase and position (what the watchdogs exchange).
  struct Pulse {
    uint64_t heartbeat = 0;
    RankPhase phase = RankPhase::starting;
    int64_t step = -1;
    int instr = -1;
    std::string instr_name;
  };
  Pulse pulse() const;

 private:
  FlightRecorder() = default;  // read_file's view of a mapping
  struct Header;
  struct Slot;
  Header* header() const;
  Slot* slot(uint64_t number) const;

  std::string path_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  size_t capacity_ = 0;
};

// "step 5, instruction #123 'grad bucket 0'", or "the start of step 5"
// between steps (instr -1).
std::string describe_position(int64_t step, int instr, const std::string& name);

// `<run dir>/flight/rank<R>`.
std::string flight_path(const std::string& run_dir, int rank);

}  // namespace px
