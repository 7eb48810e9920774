// Communicator: a group of ranks over a Transport, with its own tag space and
// a timeout on every wait. split(color, key) makes sub-groups (rows and
// columns of a device mesh), each again a Communicator. Copies share state.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/transport.h"

namespace px::comm {

class SharedMemoryGroup;  // comm/shared_memory.h
struct CostModel;         // comm/cost_model.h

struct CommunicatorOptions {
  // Every wait fails with a px::Error naming the peer after this long.
  std::chrono::milliseconds timeout{60000};
  bool operator==(const CommunicatorOptions&) const = default;
};

// Where a wait happens, for error messages: collective "allreduce(ring)", step 3.
struct Step {
  std::string_view collective;
  int index = 0;
};

class Communicator {
 public:
  // The world: every rank of `transport`, in world order.
  Communicator(std::shared_ptr<Transport> transport, CommunicatorOptions options = {});

  int rank() const;
  int size() const;
  // World rank of group rank `rank`.
  int world_rank(int rank) const;
  std::span<const int> members() const;
  Transport& transport();
  std::string_view backend() const;

  // Collective: ranks with equal color form a group, ordered by (key, rank).
  // color must be >= 0. The new group gets a tag space no other group of these
  // ranks uses, so its messages never match the parent's.
  Communicator split(int color, int key);

  // Not collective: a group of some of this communicator's ranks (`ranks`,
  // group ranks of this one, this rank among them, in the new group's
  // order) sharing its tag space, its tag sequence starting at `sequence`.
  // For groups that change every step (partial reduce's, gossip's pairs)
  // on a communicator made for them: members compute the same ranks and
  // sequence, and views in flight at once must differ in sequence or share
  // no member. Its collectives run over point-to-point messages only (no
  // shared memory, no native collective, no node groups).
  Communicator view(std::span<const int> ranks, uint32_t sequence) const;

  std::chrono::milliseconds timeout() const;
  void set_timeout(std::chrono::milliseconds timeout);

  // A tag for one collective call; every rank calls collectives in the same
  // order, so they draw the same tag. Messages of one call share it and match
  // in posting order.
  uint32_t next_tag();
  // The tag `index` (< 2^21) of this communicator's space, drawn by no
  // counter: for point-to-point messages whose tags both sides compute (a
  // pipeline's transfers) on a communicator no collective runs on.
  uint32_t fixed_tag(uint32_t index) const;

  // Bytes this rank has posted to send on this group so far (every
  // algorithm over the transport; shared-memory copies are not sends),
  // those a collective on it sent through its node groups included.
  uint64_t bytes_sent() const;
  // Counts `bytes` a collective on this group sent through a group split
  // from it (hierarchical's node and leader groups).
  void count_sent(uint64_t bytes);

  // Point-to-point on group ranks.
  Request isend(int peer, uint32_t tag, const void* data, size_t bytes);
  Request irecv(int peer, uint32_t tag, void* data, size_t bytes);
  // Waits until done; throws px::Error naming the step and the peer on a
  // timeout, a failed rank or a size mismatch.
  void wait(Request& request, const Step& step);
  void wait_all(std::span<Request> requests, const Step& step);

  // Polls `done()` until true, with the same timeout and failure checks as
  // wait(); `what` says what was awaited from group rank `peer`.
  template <typename Done>
  void spin_until(Done done, int peer, const Step& step, std::string_view what) {
    if (done()) return;
    Spinner spinner(*this);
    while (!done()) spinner.pause(peer, step, what);
  }

  // Shared memory among the group, created collectively on first use;
  // nullptr when the members do not share a host.
  SharedMemoryGroup* shared_memory();
  // Each member's host by group rank, hosts numbered in order of first
  // appearance (the members on group rank 0's host are 0); collective on
  // the first call (every member sends its transport's host id to every
  // other), cached after.
  const std::vector<int>& hosts();
  // Sub-communicators for hierarchical algorithms, cached by ranks_per_node:
  // {ranks of my node, leaders of all nodes (valid only on leaders)}.
  std::pair<Communicator*, Communicator*> node_groups(int ranks_per_node);

  // Scratch memory kept between calls (large buffers fault in pages once):
  // `index` names independent buffers; contents are undefined on return.
  void* scratch(size_t bytes, int index = 0);

  const CostModel& cost_model() const;
  void set_cost_model(std::shared_ptr<const CostModel> model);

  // "peer rank 2" or "peer rank 2 (world rank 5)".
  std::string peer_name(int rank) const;

  class Spinner {
   public:
    explicit Spinner(Communicator& comm);
    // One backoff step; throws on timeout or a failed rank.
    void pause(int peer, const Step& step, std::string_view what);

   private:
    Communicator& comm_;
    std::chrono::steady_clock::time_point start_;
    uint64_t spins_ = 0;
    int sleep_us_ = 0;  // 0: still spinning or yielding; else the next sleep's length
  };

 private:
  struct State;
  Communicator(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace px::comm
