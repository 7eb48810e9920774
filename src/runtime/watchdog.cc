#include "runtime/watchdog.h"

#include <algorithm>

#include <fmt/format.h>

namespace px {

using Clock = std::chrono::steady_clock;

Watchdog::Watchdog(WatchdogOptions options, std::vector<Local> locals, int world, PulseReader peers)
    : options_(std::move(options)),
      locals_(std::move(locals)),
      world_(world),
      peers_(std::move(peers)),
      period_(std::clamp(options_.timeout / 10, std::chrono::milliseconds(20), std::chrono::milliseconds(1000))),
      seen_(static_cast<size_t>(world)),
      began_(Clock::now()) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::string Watchdog::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void Watchdog::attach(size_t index, comm::Transport* transport) {
  std::lock_guard lock(mutex_);
  locals_.at(index).transport = transport;
  if (!failure_.empty() && transport != nullptr) transport->declare_failure(failure_);
}

void Watchdog::loop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    lock.unlock();
    tick(Clock::now());
    lock.lock();
    wake_.wait_for(lock, period_, [this] { return stop_; });
  }
}

void Watchdog::tick(Clock::time_point now) {
  // Beat for this process's ranks, unless one plays dead (--inject-fault).
  for (const Local& l : locals_) {
    const RankPhase phase = l.recorder->phase();
    if (phase != RankPhase::frozen && phase != RankPhase::killed && phase != RankPhase::lost) l.recorder->beat();
  }
  if (!failure().empty()) {
    if (!stuck_called_ && options_.stuck && now - declared_at_ > options_.grace) {
      const bool stopped = std::all_of(locals_.begin(), locals_.end(), [](const Local& l) {
        const RankPhase p = l.recorder->phase();
        return p == RankPhase::failed || p == RankPhase::finished;
      });
      if (!stopped) {
        stuck_called_ = true;
        options_.stuck(failure());
      }
    }
    return;
  }
  for (int r = 0; r < world_; ++r) {
    std::optional<FlightRecorder::Pulse> pulse;
    for (const Local& l : locals_)
      if (l.recorder->rank() == r) pulse = l.recorder->pulse();
    if (!pulse) pulse = peers_ ? peers_(r) : std::nullopt;
    Seen& seen = seen_[static_cast<size_t>(r)];
    std::string reason;
    if (!pulse) {
      if (now - began_ > options_.timeout)
        reason = fmt::format("rank {} is silent: it has not started its flight record within the {:.1f} s timeout",
                             r, options_.timeout.count() / 1e3);
    } else {
      if (!seen.started || pulse->heartbeat != seen.heartbeat) {
        seen = {.heartbeat = pulse->heartbeat, .changed = now, .started = true};
        continue;
      }
      if (pulse->phase == RankPhase::finished || pulse->phase == RankPhase::failed) continue;
      const double silent_s = std::chrono::duration<double>(now - seen.changed).count();
      if (now - seen.changed > options_.timeout)
        reason = fmt::format("rank {} is silent: no heartbeat for {:.1f} s (timeout {:.1f} s); it was last at {}", r,
                             silent_s, options_.timeout.count() / 1e3,
                             describe_position(pulse->step, pulse->instr, pulse->instr_name));
    }
    if (reason.empty()) continue;
    // Recorded where the doctor reads it: which rank, last heard when (wall clock).
    const int64_t heard_ns =
        !pulse ? 0
               : std::chrono::duration_cast<std::chrono::nanoseconds>(
                     (std::chrono::system_clock::now() - (now - seen.changed)).time_since_epoch())
                     .count();
    for (const Local& l : locals_) l.recorder->set_suspect(r, heard_ns);
    std::lock_guard lock(mutex_);
    failure_ = reason;
    declared_at_ = now;
    for (const Local& l : locals_)
      if (l.transport != nullptr) l.transport->declare_failure(reason);
    return;
  }
}

Watchdog::PulseReader pulses_from_files(const std::string& run_dir) {
  return [run_dir](int rank) { return FlightRecorder::pulse_of_file(flight_path(run_dir, rank)); };
}

}  // namespace px
