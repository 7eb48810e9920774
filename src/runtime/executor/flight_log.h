// The executor's entries in its rank's flight recorder
// (runtime/fault/flight_recorder.h): where it is (step, instruction) and
// every collective, reshard and transfer it posts and completes, with the
// sequence number its group gives it (a transfer: its tag); and the
// context an error in an instruction is reported with.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "core/error.h"
#include "parallel/program.h"
#include "runtime/executor/transfers.h"
#include "runtime/fault/flight_recorder.h"

namespace px {

// Where an instruction communicates.
struct FlightSite {
  FlightKind kind;
  std::string what;  // "allreduce", "reshard S(0) -> B", "send"
  std::string axis;
  uint64_t sequence = 0;  // the n-th call on its group this step (Instr::sequence); a transfer's tag
  uint64_t bytes = 0;
  int peer = -1;  // a transfer's peer, as a world rank
};

// Instruction `id`'s site (none for one that talks to no other rank).
std::optional<FlightSite> flight_site(const parallel::Program& program, const Transfers& transfers, int id);

// `e`, raised by instruction `id` (-1: none known) of step `step` (from
// 0), as an error that names the step, the instruction and its site.
Error in_context(const parallel::Program& program, uint64_t step, int id, const std::optional<FlightSite>& site,
                 const std::exception& e);

class FlightLog {
 public:
  // nullptr: off. It must outlive the log.
  void set_recorder(FlightRecorder* recorder) { recorder_ = recorder; }
  bool on() const { return recorder_ != nullptr; }

  // Step `position` (from 1) is at instruction `id`; if the instruction
  // communicates, its event is posted: returns its site.
  std::optional<FlightSite> at(const parallel::Program& program, const Transfers& transfers, int64_t position, int id);
  // Instruction `id`'s event completed (or, `ok` false, failed).
  void done(int id, bool ok = true);
  // Every event whose instruction `finished` says is done, done.
  void done_where(const std::function<bool(int id)>& finished);
  // After a failure: every event left open is dropped.
  void abandon() { events_.clear(); }
  // The first instruction with an open event `finished` does not call
  // done (-1: none), and the site of an instruction posted since the last
  // forget_sites (the active Program's).
  int oldest_open(const std::function<bool(int id)>& finished) const;
  std::optional<FlightSite> site_of(int id) const;
  void forget_sites() { sites_.clear(); }  // the active Program changes

 private:
  FlightRecorder* recorder_ = nullptr;
  std::map<int, uint64_t> events_;    // instruction -> its open event
  std::map<int, FlightSite> sites_;   // instruction -> where it communicates (for errors)
};

}  // namespace px
