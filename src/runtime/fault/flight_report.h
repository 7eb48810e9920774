// What `parallax doctor RUN_DIR` prints: every rank's flight record
// (runtime/fault/flight_recorder.h) side by side, and which rank fell behind.
//
// The rank that fell behind is the one the other ranks' watchdogs declared
// silent (most named), if they did; else one that did not report an error itself
// (a failed rank wrote its error; a killed, stopped or hung one could not)
// and, among those, the one whose heartbeat stopped first; if every rank
// reported, the one furthest back (lowest step, then the oldest
// heartbeat). For it: its phase, where it was and its last events; for
// each other rank: what it waits for (events posted and not done), with
// the group's sequence numbers side by side.
#pragma once

#include <string>
#include <vector>

#include "runtime/fault/flight_recorder.h"

namespace px {

// Every rank's record under `run_dir` (flight/rank0 .. rank<world-1>);
// px::Error names a missing directory. A missing rank file is left out.
std::vector<FlightDump> read_flight_records(const std::string& run_dir);
// The records of one job gathered from several run directories (each
// host's own, when the hosts share no filesystem: each holds its ranks'
// records), by rank. px::Error names a directory without records and a
// rank found in two of them.
std::vector<FlightDump> read_flight_records(const std::vector<std::string>& run_dirs);

// After a failed attempt, before a restart writes new records: moves
// `<run_dir>/flight` to `<run_dir>/attempt-<attempt>/flight`, where
// `parallax doctor <run_dir>/attempt-<attempt>` still reads it (attempts
// count from 1). Returns that directory ("" when there were no records).
std::string archive_flight_records(const std::string& run_dir, int attempt);

struct FlightDiagnosis {
  int behind = -1;         // the rank that fell behind (-1: none found)
  int64_t last_heard_ns = 0;  // its last heartbeat (CLOCK_REALTIME), as the ranks that declared it silent saw it
  std::string report;      // the text doctor prints
};

// `now_ns`: CLOCK_REALTIME now (heartbeat ages; the records share a host
// clock or closely synchronised ones).
FlightDiagnosis diagnose(const std::vector<FlightDump>& ranks, int64_t now_ns);

}  // namespace px
