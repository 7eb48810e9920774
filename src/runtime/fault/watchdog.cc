#include "runtime/fault/watchdog.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace px {

using Clock = std::chrono::steady_clock;

Watchdog::Watchdog(WatchdogOptions options, std::vector<Local> locals, int world, WatchdogPeers* peers)
    : options_(std::move(options)),
      locals_(std::move(locals)),
      world_(world),
      peers_(peers),
      period_(period_for(options_.timeout)),
      seen_(static_cast<size_t>(world)),
      began_(Clock::now()) {
  PX_CHECK(peers_ == nullptr || locals_.size() == 1, "a watchdog with peers watches one rank of its own, not {}",
           locals_.size());
  thread_ = std::thread([this] { loop(); });
}

std::chrono::milliseconds Watchdog::period_for(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 10, std::chrono::milliseconds(20), std::chrono::milliseconds(1000));
}

std::chrono::milliseconds Watchdog::latest_verdict(std::chrono::milliseconds timeout) {
  return timeout + 2 * period_for(timeout);
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  // After a verdict the peers are failing too: nobody to wait for.
  if (peers_ == nullptr || !failure().empty()) return;
  // The rank's last phase (finished, failed), so the peers stop watching
  // it; then their last words, so none of their heartbeats arrives after
  // this rank stopped listening (MPICH warns of unreceived messages). A
  // peer that has not taken this rank's previous heartbeat yet (it has not
  // polled since the thread's last beat) gets the last phase only once it
  // has: receive() sends it then, and this rank leaves only after every
  // peer took it, or that peer would wait here for the whole timeout.
  peers_->exchange(news());
  const int own = locals_.front().recorder->rank();
  const auto until = Clock::now() + options_.timeout;
  std::vector<int> waiting;  // the peers not yet known to have ended
  bool delivered = false;
  for (bool all_ended = false; !all_ended && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    peers_->receive();
    delivered = peers_->delivered();
    waiting.clear();
    for (int r = 0; r < world_; ++r) {
      if (r == own) continue;
      const std::optional<WatchdogNews> last = peers_->heard(r);
      if (!last || (last->pulse.phase != RankPhase::finished && last->pulse.phase != RankPhase::failed))
        waiting.push_back(r);
    }
    all_ended = delivered && waiting.empty();
  }
  // Never silent: a job that ends well but waited here for its whole
  // timeout is a lost message, and its log says so (the MPI tests fail on it).
  if (!delivered || !waiting.empty())
    fmt::print(stderr,
               "warning: rank {} waited the whole --timeout ({} ms) at the end of the run{}{}; leaving without them\n",
               own, options_.timeout.count(),
               waiting.empty() ? "" : fmt::format(" for rank(s) {} to say they ended", fmt::join(waiting, ", ")),
               delivered ? "" : " for its last heartbeat to be taken");
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

WatchdogNews Watchdog::news() const {
  std::lock_guard lock(mutex_);
  return {.pulse = locals_.front().recorder->pulse(),
          .verdict = verdict_,
          .suspect = suspect_,
          .suspect_heard_ns = suspect_heard_ns_};
}

void Watchdog::declare(const std::string& verdict, int declared_by, int suspect, int64_t heard_ns,
                       Clock::time_point now) {
  // Recorded where the doctor reads it: which rank, last heard when (wall clock).
  for (const Local& l : locals_) l.recorder->set_suspect(suspect, heard_ns);
  const std::string reason =
      declared_by < 0 ? verdict : fmt::format("{} (declared by rank {})", verdict, declared_by);
  std::lock_guard lock(mutex_);
  failure_ = reason;
  verdict_ = verdict;
  suspect_ = suspect;
  suspect_heard_ns_ = heard_ns;
  declared_at_ = now;
  for (const Local& l : locals_)
    if (l.transport != nullptr) l.transport->declare_failure(reason);
}

void Watchdog::tick(Clock::time_point now) {
  // Beat for this process's ranks, unless one plays dead (--inject-fault).
  for (const Local& l : locals_) {
    const RankPhase phase = l.recorder->phase();
    if (phase != RankPhase::frozen && phase != RankPhase::killed && phase != RankPhase::lost) l.recorder->beat();
  }
  // Also after a verdict: it travels to the others with the news.
  if (peers_ != nullptr) peers_->exchange(news());
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
  std::vector<std::optional<WatchdogNews>> heard(static_cast<size_t>(world_));
  if (peers_ != nullptr)
    for (int r = 0; r < world_; ++r) heard[static_cast<size_t>(r)] = peers_->heard(r);
  // A verdict another watchdog reached is this one's too (it may see a
  // rank this one cannot, or sooner).
  for (int r = 0; r < world_; ++r) {
    const std::optional<WatchdogNews>& news = heard[static_cast<size_t>(r)];
    if (!news || news->verdict.empty()) continue;
    declare(news->verdict, r, news->suspect, news->suspect_heard_ns, now);
    return;
  }
  for (int r = 0; r < world_; ++r) {
    std::optional<FlightRecorder::Pulse> pulse;
    for (const Local& l : locals_)
      if (l.recorder->rank() == r) pulse = l.recorder->pulse();
    if (!pulse && heard[static_cast<size_t>(r)]) pulse = heard[static_cast<size_t>(r)]->pulse;
    Seen& seen = seen_[static_cast<size_t>(r)];
    std::string reason;
    if (!pulse) {
      if (now - began_ > options_.timeout)
        reason = fmt::format("rank {} is silent: it has sent no heartbeat within the {:.1f} s timeout", r,
                             options_.timeout.count() / 1e3);
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
    const int64_t heard_ns =
        !pulse ? 0
               : std::chrono::duration_cast<std::chrono::nanoseconds>(
                     (std::chrono::system_clock::now() - (now - seen.changed)).time_since_epoch())
                     .count();
    declare(reason, -1, r, heard_ns, now);
    return;
  }
}

}  // namespace px
