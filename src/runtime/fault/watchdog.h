// Watchdog: one thread per process that beats the heartbeat of this
// process's ranks (their FlightRecorders) and watches every rank's. A rank
// whose heartbeat has not moved for the timeout is silent (dead, stopped,
// or frozen): the watchdog makes every wait of this process's ranks stop
// with an error naming it, where it was, and for how long it has been
// silent (comm::Transport::declare_failure), so a rank busy computing, or
// waiting on a healthy neighbour of the silent one, learns it too.
//
// Liveness is judged on this host's clock only: the watchdog notes when it
// saw each peer's counter change, so no clocks need agree across hosts.
// In-process ranks are read straight from their recorders; the ranks of
// other processes (MPI) are heard over the job's own transport
// (WatchdogPeers, runtime/fault/watchdog_peers.h), which also carries each
// watchdog's verdict to the others. No filesystem is involved: the flight
// files of a run directory are for `parallax doctor` only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/transport.h"
#include "runtime/fault/flight_recorder.h"

namespace px {

struct WatchdogOptions {
  std::chrono::milliseconds timeout{60000};  // silence longer than this is a failure
  // Called once, on the watchdog's thread, when a peer was declared silent
  // and this process's ranks have not stopped `grace` later (a rank blocked
  // in a call that never polls, such as the MPI library's own collective):
  // the MPI trainer aborts the job there. Empty: nothing.
  std::function<void(const std::string& reason)> stuck;
  std::chrono::milliseconds grace{2000};
};

// What a process's watchdog tells the others every period: its rank's
// pulse, and its verdict once it declared a rank silent.
struct WatchdogNews {
  FlightRecorder::Pulse pulse;
  std::string verdict;           // the failure it declared ("": none)
  int suspect = -1;              // the rank the verdict names
  int64_t suspect_heard_ns = 0;  // when it last saw that rank's heartbeat move (CLOCK_REALTIME)
};

// The ranks of other processes, one rank per process, as a watchdog hears them.
class WatchdogPeers {
 public:
  virtual ~WatchdogPeers() = default;
  // Sends this process's news to every other rank and takes theirs; never blocks.
  virtual void exchange(const WatchdogNews& mine) = 0;
  // Only takes theirs (and sends this process's news exchange() had to hold back).
  virtual void receive() = 0;
  // True once every other rank has taken this process's latest news (none
  // held back, none in flight).
  virtual bool delivered() { return true; }
  // The latest news from world rank `rank` (std::nullopt: none heard yet).
  virtual std::optional<WatchdogNews> heard(int rank) const = 0;
};

class Watchdog {
 public:
  struct Local {
    FlightRecorder* recorder = nullptr;
    comm::Transport* transport = nullptr;  // or attach() it later
  };
  // `locals`: this process's ranks. `peers`: the ranks of other processes
  // (nullptr: every rank is local); with peers, this process has one rank.
  // `peers` must outlive the watchdog.
  Watchdog(WatchdogOptions options, std::vector<Local> locals, int world, WatchdogPeers* peers = nullptr);
  // Stops the thread; with peers, tells them this rank's last phase and
  // hears theirs, until every peer's was heard and every peer took this
  // rank's (for at most the timeout), so no heartbeat is left in flight
  // when the transport closes and no peer waits here for a last word that
  // never went out.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // How often the watchdog beats and checks, for a given timeout.
  static std::chrono::milliseconds period_for(std::chrono::milliseconds timeout);
  // The latest the watchdog names a rank after it fell silent, its thread
  // running on time: the timeout and two periods (the rank's last
  // heartbeat left up to a period before it fell silent; the watchdog
  // notes it when it next looks, and looks every period). The ranks' own
  // waits (the communicator's timeout, `parallax train --wait-timeout`)
  // must last longer, or they race the verdict and fail first with the
  // vaguer "peer rank R did not answer".
  static std::chrono::milliseconds latest_verdict(std::chrono::milliseconds timeout);

  // "" while every rank is alive; else why it is not.
  std::string failure() const;
  // Local rank `index`'s transport, once it exists (in-process ranks make
  // theirs on their own threads); told at once if a failure was declared.
  void attach(size_t index, comm::Transport* transport);

  // Beats, exchanges news with the peers and checks once (the thread does
  // this every period).
  void tick(std::chrono::steady_clock::time_point now);

 private:
  void loop();
  WatchdogNews news() const;
  // `verdict` names the silent rank `suspect`: every local wait stops with
  // it (and the rank that reached it, `declared_by` >= 0, when that is not
  // this process).
  void declare(const std::string& verdict, int declared_by, int suspect, int64_t heard_ns,
               std::chrono::steady_clock::time_point now);

  WatchdogOptions options_;
  std::vector<Local> locals_;
  int world_;
  WatchdogPeers* peers_;
  std::chrono::milliseconds period_;
  struct Seen {
    uint64_t heartbeat = 0;
    std::chrono::steady_clock::time_point changed;
    bool started = false;
  };
  std::vector<Seen> seen_;
  std::chrono::steady_clock::time_point began_;
  std::chrono::steady_clock::time_point declared_at_;
  bool stuck_called_ = false;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::string failure_;
  std::string verdict_;  // failure_ as the peers are told it (without "declared by")
  int suspect_ = -1;
  int64_t suspect_heard_ns_ = 0;
  std::thread thread_;
};

}  // namespace px
