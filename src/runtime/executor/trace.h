// Chrome trace (JSON, opens in Perfetto / chrome://tracing) of compute and
// communication per rank: one process per rank, a "compute" lane with every
// graph node run and the main thread's local passes (accumulate, norm,
// finite, clip, update), a "comm" lane with what the main thread waited on
// another rank for, and a "progress" lane with every collective (or slice)
// the progress engine ran, each tagged with its Program instruction id (the
// id a simulator's trace of the same Program uses). Times are
// comm::now_us() microseconds.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/engine/comm_engine.h"
#include "plan/chrome_trace.h"

namespace px {

// The records of the steps an executor runs while tracing is on. A
// record's name is made after the step (take_trace): small allocations
// between the step's tensors fragmented the heap and made a traced GPT
// step 1.5-2.4x slower (26k more page faults over three steps).
struct StepTrace {
  bool on = false;
  std::vector<TraceRecord> records;
  // A record of instruction `instr` on `lane` from `start_us` until now.
  void add(TraceRecord::Lane lane, double start_us, int64_t bytes, int64_t step, int instr) {
    records.push_back({.name = {}, .lane = lane, .start_us = start_us, .duration_us = comm::now_us() - start_us,
                       .bytes = bytes, .step = step, .instr = instr});
  }
};

// Collective over `group` (nullptr: one rank): gathers every rank's records
// to rank 0, which writes `path` atomically.
void write_chrome_trace(const std::string& path, comm::Communicator* group, const std::vector<TraceRecord>& mine);

}  // namespace px
