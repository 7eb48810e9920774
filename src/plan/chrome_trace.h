// Chrome trace (JSON, opens in Perfetto / chrome://tracing) of compute and
// communication per rank, as a training run measures it
// (runtime/executor/trace.h) and as the simulator replays it: one process
// per rank, a "compute" lane (graph nodes and the main thread's local
// passes), a "comm" lane (what the main thread waited on another rank for)
// and a "progress" lane (collectives on a progress engine), each event
// tagged with its Program instruction id. Times in microseconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/simulate.h"

namespace px {

struct TraceRecord {
  // compute: the main thread's computes and local passes; comm: what blocks it on another
  // rank (inline collectives, reshards, receives); progress: collectives on
  // a progress engine's thread (the Program's progress lanes).
  enum class Lane { compute = 0, comm = 1, progress = 2 };
  std::string name;
  Lane lane = Lane::compute;
  double start_us = 0;
  double duration_us = 0;
  int64_t bytes = 0;  // comm: payload bytes
  int64_t step = 0;
  int instr = -1;  // the Program instruction it ran (parallel/program.h), -1 if none
};

// Rank `rank`'s records as the trace's JSON events array (text).
std::string chrome_trace_events(int rank, const std::vector<TraceRecord>& records);
// The whole file from every rank's events arrays (chrome_trace_events), written atomically.
void write_chrome_trace_file(const std::string& path, const std::vector<std::string>& events_per_rank);
// Every rank's records at hand: one process per rank.
void write_chrome_trace(const std::string& path, const std::vector<std::vector<TraceRecord>>& per_rank);

namespace plan {

// The simulated step `sim` of `ranks` ranks as a Chrome trace.
void write_simulated_trace(const std::string& path, const Simulation& sim, int ranks);

}  // namespace plan
}  // namespace px
