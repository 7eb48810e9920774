// What a job is told about faults (docs/fault_tolerance.md): the fault
// room's part of a job. Faults to inject, batches to skip, and how long a
// silent rank or a wait may last before the job says so.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/fault/fault_injection.h"

namespace px {

// --wait-timeout's default, as a multiple of --timeout: far enough past the
// watchdog's verdict (the timeout and two of its periods) that a wait begun
// well before its peer fell silent still hears the verdict first.
inline constexpr int kWaitTimeoutPerTimeout = 3;
// The longest --timeout or --wait-timeout a user may give (about 31 years:
// as good as none), so both stay exact in the runtime's milliseconds.
inline constexpr double kLongestTimeoutSeconds = 1e9;

struct FaultOptions {
  int inject_delay_rank = -1;    // this rank sleeps inject_delay_ms before each step (a straggler, for demonstrations)
  int64_t inject_delay_ms = 0;
  // Bad steps: batches are numbered from 1 in the order drawn.
  // --skip-batches never trains on these; --inject-nan makes the batch each
  // of these steps draws first non-finite (every time it runs).
  std::vector<int64_t> skip_batches;
  std::vector<int64_t> inject_nan_steps;
  InjectedFault inject_fault;    // --inject-fault (fault_injection.h), on a job's first attempt only
  // Liveness (liveness_timeouts() below): a rank whose heartbeat stops for
  // timeout_s is named by every other (watchdog.h); a wait that lasts
  // wait_timeout_s fails by itself, the backstop for what no heartbeat
  // shows (a live peer that never sends). 0: kWaitTimeoutPerTimeout x timeout_s.
  double timeout_s = 60;
  double wait_timeout_s = 0;
  // Where the run keeps its flight records (flight/rank<R>), for `parallax
  // doctor`. Empty: in memory only.
  std::string run_dir;
  bool operator==(const FaultOptions&) const = default;
};

// Checks the options for a job of `ranks` ranks (px::Error naming the flag).
void validate(const FaultOptions& options, int ranks);

// Liveness as the runtime takes it: the watchdog's timeout, after which a
// silent rank is named (--timeout), and every wait's own (--wait-timeout,
// or kWaitTimeoutPerTimeout x --timeout), which the communicators get.
struct LivenessTimeouts {
  std::chrono::milliseconds heartbeat;
  std::chrono::milliseconds wait;
  bool operator==(const LivenessTimeouts&) const = default;
};
// The two from `options`, checked as validate() checks them (px::Error
// naming the flag): a job takes them before its ranks validate the rest.
LivenessTimeouts liveness_timeouts(const FaultOptions& options);

}  // namespace px
