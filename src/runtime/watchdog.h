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
// Peers are read from their flight files in the run directory (MPI), or
// straight from the recorders of the in-process ranks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/transport.h"
#include "runtime/flight_recorder.h"

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

class Watchdog {
 public:
  struct Local {
    FlightRecorder* recorder = nullptr;
    comm::Transport* transport = nullptr;  // or attach() it later
  };
  // `locals`: this process's ranks. `peers`: a pulse reader per world rank
  // (std::nullopt while a peer has not started); the local ranks' own are
  // read from their recorders.
  using PulseReader = std::function<std::optional<FlightRecorder::Pulse>(int rank)>;
  Watchdog(WatchdogOptions options, std::vector<Local> locals, int world, PulseReader peers);
  ~Watchdog();  // stops the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // "" while every rank is alive; else why it is not.
  std::string failure() const;
  // Local rank `index`'s transport, once it exists (in-process ranks make
  // theirs on their own threads); told at once if a failure was declared.
  void attach(size_t index, comm::Transport* transport);

  // Beats and checks once (the thread does this every period).
  void tick(std::chrono::steady_clock::time_point now);

 private:
  void loop();

  WatchdogOptions options_;
  std::vector<Local> locals_;
  int world_;
  PulseReader peers_;
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
  std::thread thread_;
};

// The run directory's flight files as a PulseReader.
Watchdog::PulseReader pulses_from_files(const std::string& run_dir);

}  // namespace px
