#include "runtime/fault/fault_options.h"

#include <cmath>

#include "core/error.h"
#include "runtime/fault/watchdog.h"

namespace px {

// The timeouts in the milliseconds the runtime counts, unchecked (a value
// past kLongestTimeoutSeconds would overflow them: validate_liveness first).
static LivenessTimeouts timeouts_of(const FaultOptions& o) {
  auto milliseconds = [](double seconds) { return std::chrono::milliseconds(std::llround(seconds * 1000)); };
  const double wait_s = o.wait_timeout_s == 0 ? kWaitTimeoutPerTimeout * o.timeout_s : o.wait_timeout_s;
  return {.heartbeat = milliseconds(o.timeout_s), .wait = milliseconds(wait_s)};
}

// A wait's own timeout is the backstop: it must not race the watchdog's
// verdict on a silent rank (Watchdog::latest_verdict).
static void validate_liveness(const FaultOptions& o) {
  if (!(o.timeout_s > 0) || o.timeout_s > kLongestTimeoutSeconds)
    fail("--timeout {} s: expected more than 0 and at most {:g} s", o.timeout_s, kLongestTimeoutSeconds);
  if (!(o.wait_timeout_s >= 0) || o.wait_timeout_s > kLongestTimeoutSeconds)
    fail("--wait-timeout {} s: expected 0 (the default, {} x --timeout) or more than --timeout, at most {:g} s",
         o.wait_timeout_s, kWaitTimeoutPerTimeout, kLongestTimeoutSeconds);
  const LivenessTimeouts t = timeouts_of(o);
  const std::chrono::milliseconds verdict = Watchdog::latest_verdict(t.heartbeat);
  if (t.wait > verdict) return;
  const std::string given = o.wait_timeout_s == 0
                                ? fmt::format("{:g} s (the default, {} x --timeout {} s)", t.wait.count() / 1e3,
                                              kWaitTimeoutPerTimeout, o.timeout_s)
                                : fmt::format("{} s", o.wait_timeout_s);
  fail("--wait-timeout {} must be longer than {:g} s: the watchdog names a silent rank up to --timeout {} s and "
       "two of its {:g} s periods after it fell silent, and a wait's own timeout is the backstop after that verdict",
       given, verdict.count() / 1e3, o.timeout_s, Watchdog::period_for(t.heartbeat).count() / 1e3);
}

LivenessTimeouts liveness_timeouts(const FaultOptions& o) {
  validate_liveness(o);
  return timeouts_of(o);
}

void validate(const FaultOptions& o, int ranks) {
  if (o.inject_delay_rank >= ranks)
    fail("--inject-delay names rank {}, but the job has ranks 0..{}", o.inject_delay_rank, ranks - 1);
  if (o.inject_delay_ms < 0) fail("injected delay {} ms must be >= 0", o.inject_delay_ms);
  for (int64_t b : o.skip_batches)
    if (b < 1) fail("--skip-batches {}: batches are numbered from 1 in the order drawn", b);
  for (int64_t s : o.inject_nan_steps)
    if (s < 1) fail("--inject-nan {}: steps are numbered from 1", s);
  validate_liveness(o);
  if (o.inject_fault.rank >= ranks)
    fail("--inject-fault names rank {}, but the job has ranks 0..{}", o.inject_fault.rank, ranks - 1);
  if (o.inject_fault.rank >= 0 && o.inject_fault.step < 1)
    fail("--inject-fault step {}: steps are numbered from 1", o.inject_fault.step);
  if (o.inject_fault.mode != "kill" && o.inject_fault.mode != "hang" && o.inject_fault.mode != "lost" &&
      !routing_fault(o.inject_fault))
    fail("--inject-fault mode '{}': expected kill, hang, lost, moe-capacity or moe-expert", o.inject_fault.mode);
}

}  // namespace px
