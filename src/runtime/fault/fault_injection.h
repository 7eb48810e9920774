// --inject-fault: a rank that dies, freezes or is lost for good at the
// start of a step, as a real process would (docs/fault_tolerance.md); and
// the wall clock restarts are timed by.
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "runtime/fault/flight_recorder.h"

namespace px {

// --inject-fault RANK:STEP[:kill|hang|lost|moe-capacity|moe-expert]: at
// the start of step `step` (from 1) rank `rank` dies or freezes: under MPI
// by SIGKILL or SIGSTOP; in process its thread stops and its heartbeat
// with it. `lost` dies and will not come back (a restart continues with
// fewer ranks); the moe- modes corrupt its routing (routing_fault). The
// run injects it on its first attempt only.
struct InjectedFault {
  int rank = -1;  // -1: none
  int64_t step = 0;
  std::string mode = "kill";
  bool operator==(const InjectedFault&) const = default;
};

// moe-capacity / moe-expert: the rank goes on running, but its routed
// exchanges (expert parallelism) claim another capacity factor than the
// other expert ranks', or route a row to an expert that does not exist,
// from step `step` on: the exchange's agreement must name it on every rank
// (runtime/executor/expert_exchange.h), not hang.
inline bool routing_fault(const InjectedFault& fault) {
  return fault.mode == "moe-capacity" || fault.mode == "moe-expert";
}

// An in-process rank that --inject-fault stopped: its thread ends quietly
// (a dead process tells nobody), and the others must notice its silence.
struct RankStopped {};

// Seconds since the Unix epoch (checkpoints' "saved_at", restarts' times).
double unix_seconds();

// The fault, now: under MPI (`mpi`) the process raises SIGKILL or SIGSTOP;
// in process the rank records its phase and throws RankStopped (a frozen
// rank first waits until the others have given up on it). A lost rank
// marks itself in `run_dir`/lost/ for `parallax launch`; under MPI it
// needs a run_dir (px::Error otherwise).
void inject_fault_now(const InjectedFault& fault, bool mpi, const std::string& run_dir, FlightRecorder* recorder,
                      comm::Communicator* group);

}  // namespace px
