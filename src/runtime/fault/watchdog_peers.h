// The watchdog's news carried over the job's own transport: each period a
// fixed-size message from this process's rank to every other rank
// (comm::Heartbeats, on a communicator of its own), holding its pulse and
// its verdict. Used under MPI, where the ranks are processes on hosts that
// need share no filesystem.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "comm/heartbeats.h"
#include "runtime/fault/watchdog.h"

namespace px {

class TransportPeers : public WatchdogPeers {
 public:
  // The message: a pulse, a verdict; names and reasons are cut to fit.
  static constexpr size_t kMessageBytes = 512;

  // Collective over `world`, this process's one rank among them.
  explicit TransportPeers(comm::Communicator& world);

  void exchange(const WatchdogNews& mine) override;
  void receive() override;
  bool delivered() override;
  std::optional<WatchdogNews> heard(int rank) const override;

 private:
  comm::Heartbeats heartbeats_;
};

// The message's bytes and back (the same binary runs on every host).
std::vector<std::byte> encode_news(const WatchdogNews& news);
std::optional<WatchdogNews> decode_news(std::span<const std::byte> bytes);

}  // namespace px
