// Heartbeats: a small message of fixed size that every member of a group
// sends every other member once per period, on a communicator of its own
// (so it never matches the collectives' traffic), keeping the latest one
// heard from each. Liveness thus travels over the job's own transport and
// needs no filesystem the hosts share; runtime/fault/watchdog.h gives the bytes
// their meaning and judges silence.
//
// Threads: after the collective constructor, one thread (the watchdog's)
// calls exchange() and latest() while the rank's own threads use the same
// transport, which allows that (MPI: MPI_THREAD_MULTIPLE, or every call
// serialized).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace px::comm {

class Heartbeats {
 public:
  // Collective over `group` (it splits a communicator for the messages).
  Heartbeats(Communicator& group, size_t message_bytes);
  ~Heartbeats();  // withdraws what is still posted
  Heartbeats(const Heartbeats&) = delete;
  Heartbeats& operator=(const Heartbeats&) = delete;

  // Sends `message` (message_bytes long) to every other member and takes
  // every message that has arrived; never blocks. At most one message per
  // member is in flight: while a member has not taken the previous one (a
  // stopped process, a full link, a peer that has not polled since) the
  // new one is held back, a later one replacing it, and goes out once the
  // one in flight is done (at the next exchange(), receive() or
  // delivered()). So the latest wins, nothing piles up, and the latest is
  // never dropped: a finished rank's last word reaches every member that
  // keeps receiving.
  void exchange(std::span<const std::byte> message);
  // Takes what has arrived and sends what exchange() held back (after a
  // member's last message: hearing the others' last ones, so none is left
  // unreceived when the transport closes).
  void receive();
  // Sends what exchange() held back; true once every member this rank can
  // still reach was sent its latest message and took it (none held back,
  // none in flight).
  bool delivered();
  // The latest message from group rank `member` (empty until one arrived).
  std::span<const std::byte> latest(int member) const;
  // Why `member` is heard from no more ("" while it is): the transport
  // failed a transfer with it. Its latest message stays.
  const std::string& broken(int member) const;

 private:
  struct Peer {
    std::vector<std::byte> outgoing, incoming, latest, held;
    Request send, receive;
    bool sending = false;
    bool holding = false;  // `held` waits for the send in flight
    std::string broken;
  };
  void post_receive(int member);
  void take(int member);       // what has arrived from `member`
  void send_held(int member);  // `held`, once nothing is in flight to `member`

  Communicator comm_;
  size_t bytes_;
  uint32_t tag_;
  std::vector<Peer> peers_;  // by group rank; this rank's own stays empty
};

}  // namespace px::comm
