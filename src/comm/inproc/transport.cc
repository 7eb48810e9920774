// In-process transport: ranks are threads sharing one World. Each rank has a
// mailbox of unmatched sends addressed to it and unmatched receives it posted;
// whoever completes a match copies the bytes (one copy, no staging).
// With a link limit (InprocOptions::link_gbps) every send reserves its
// sender's Link (inproc/link.h) and both sides complete only when the link
// has delivered it; waiting for that due time sleeps rather than spins.
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "comm/backends.h"
#include "comm/inproc/link.h"
#include "comm/transport.h"
#include "core/error.h"
#include "core/memory.h"

namespace px::comm {
namespace {

enum OpStatus : int { kPending = 0, kDone = 1, kSizeMismatch = 2 };

struct Op : RequestState {
  int source = 0;
  int destination = 0;
  uint32_t tag = 0;
  const void* send_data = nullptr;
  void* recv_data = nullptr;
  size_t bytes = 0;
  size_t other_bytes = 0;  // the matching side's size, on a mismatch
  // Link-limited worlds: when the last byte arrives (the send's, copied to
  // the receive at the match). Default: no delay.
  inproc::Link::Clock::time_point due{};
  std::atomic<int> status{kPending};
};

// Limited links: test() blocks (futex or sleep) for at most this long per
// call, so its waiter still checks timeouts and failed peers between calls.
// It never returns "not yet" quickly after the first few polls, since the
// caller's wait would then sched_yield — and when ranks outnumber cores a
// yield hands the core to a computing thread until the next scheduler tick
// (4 ms), while a blocked thread's wake-up preempts it.
constexpr auto kMaxBlock = std::chrono::milliseconds(2);
// Polls that return at once before test() blocks (peers usually post within
// microseconds of each other).
constexpr int kQuickPolls = 32;
// Sleeping towards a due time ends this much early (a VM wakes ~30 us late
// even with a 1 ns timer slack, ~100 us with the default 50 us); a spin
// covers the rest.
constexpr auto kWakeUpMargin = std::chrono::microseconds(40);

using LinkClock = inproc::Link::Clock;

// Blocks until *status is no longer kPending or `until` passes (futex on the
// atomic's int; complete() wakes it in limited worlds).
void wait_while_pending(std::atomic<int>& status, LinkClock::time_point until) {
  static_assert(sizeof(std::atomic<int>) == sizeof(int));
  const auto left = until - LinkClock::now();
  if (left <= LinkClock::duration::zero()) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<int*>(&status), FUTEX_WAIT_PRIVATE, kPending, &timeout,
          nullptr, 0);
}
void wake_waiters(std::atomic<int>& status) {
  syscall(SYS_futex, reinterpret_cast<int*>(&status), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

// Precise sleeps for the calling thread (it waits on a limited link): a
// 1 ns timer slack instead of Linux's default 50 us. Once per thread.
void use_precise_sleeps() {
  thread_local bool done = false;
  if (done) return;
  prctl(PR_SET_TIMERSLACK, 1UL);
  done = true;
}

struct Mailbox {
  std::mutex mutex;
  std::deque<std::shared_ptr<Op>> sends;  // to this rank, not yet received
  std::deque<std::shared_ptr<Op>> recvs;  // posted by this rank, not yet matched
};

// What a Request holds. Dropping it before completion (an algorithm unwinding
// after an error) withdraws the op, or waits out a copy already under way, so
// no other rank touches the buffer once its owner has moved on. A 0-byte op
// has no buffer and may stay posted.
struct Handle : RequestState {
  std::shared_ptr<Op> op;
  Mailbox* box = nullptr;  // where the op waits to be matched
  bool sending = false;
  int polls = 0;  // test() calls so far (limited links)
  ~Handle() override {
    if (op->bytes == 0 || op->status.load(std::memory_order_acquire) != kPending) return;
    {
      std::lock_guard lock(box->mutex);
      auto& queue = sending ? box->sends : box->recvs;
      auto it = std::find(queue.begin(), queue.end(), op);
      if (it != queue.end()) {
        queue.erase(it);
        return;
      }
    }
    // Matched by a peer that is copying now: wait for it to finish.
    while (op->status.load(std::memory_order_acquire) == kPending) std::this_thread::yield();
  }
};

Request make_request(std::shared_ptr<Op> op, Mailbox& box, bool sending, int peer) {
  auto handle = std::make_shared<Handle>();
  handle->op = std::move(op);
  handle->box = &box;
  handle->sending = sending;
  return Request{std::move(handle), peer};
}

class Segment : public SharedSegment {
 public:
  Segment(int members, size_t bytes_per_member)
      : bytes_per_member_(bytes_per_member), total_(members * bytes_per_member) {
    // Shared by every member: the process's memory, not the creating rank's.
    const MemoryAccountScope shared(nullptr);
    data_ = static_cast<char*>(tracked_alloc(total_));
    std::memset(data_, 0, total_);
  }
  ~Segment() override { tracked_free(data_, total_); }
  void* slot(int member) override { return data_ + member * bytes_per_member_; }
  size_t bytes_per_member() const override { return bytes_per_member_; }

 private:
  size_t bytes_per_member_;
  size_t total_;
  char* data_;
};

struct World {
  World(int size, double link_gbps) : mailboxes(size), link_gbps(link_gbps), links(size) {}
  std::deque<Mailbox> mailboxes;
  double link_gbps = 0;          // 0: unlimited
  std::deque<inproc::Link> links;  // by sending rank
  std::atomic<bool> poisoned{false};
  std::mutex mutex;  // guards failure, segments
  std::string failure;
  std::exception_ptr first_error;
  // Segments being handed from a group's first member to the others:
  // (first member, tag) -> {segment, members still to pick it up}.
  std::map<std::pair<int, uint32_t>, std::pair<std::shared_ptr<Segment>, int>> segments;
};

void complete(Op& send, Op& recv, bool limited) {
  struct Wake {  // after either outcome below, in limited worlds
    Op &send, &recv;
    bool limited;
    ~Wake() {
      if (!limited) return;
      wake_waiters(send.status);
      wake_waiters(recv.status);
    }
  } wake{send, recv, limited};
  if (send.bytes != recv.bytes) {
    send.other_bytes = recv.bytes;
    recv.other_bytes = send.bytes;
    send.status.store(kSizeMismatch, std::memory_order_release);
    recv.status.store(kSizeMismatch, std::memory_order_release);
    return;
  }
  if (send.bytes > 0) std::memcpy(recv.recv_data, send.send_data, send.bytes);
  recv.due = send.due;
  recv.status.store(kDone, std::memory_order_release);
  send.status.store(kDone, std::memory_order_release);
}

class InprocTransport : public Transport {
 public:
  InprocTransport(std::shared_ptr<World> world, int rank) : world_(std::move(world)), rank_(rank) {}

  std::string_view name() const override { return "inproc"; }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_->mailboxes.size()); }

  Request isend(int peer, uint32_t tag, const void* data, size_t bytes) override {
    auto op = std::make_shared<Op>();
    op->source = rank_;
    op->destination = peer;
    op->tag = tag;
    op->send_data = data;
    op->bytes = bytes;
    if (world_->link_gbps > 0) op->due = world_->links[rank_].reserve(bytes, world_->link_gbps);
    Mailbox& box = world_->mailboxes[peer];
    std::shared_ptr<Op> match;
    {
      std::lock_guard lock(box.mutex);
      auto it = std::find_if(box.recvs.begin(), box.recvs.end(), [&](const auto& recv) {
        return recv->source == rank_ && recv->tag == tag;
      });
      if (it == box.recvs.end()) {
        box.sends.push_back(op);
      } else {
        match = *it;
        box.recvs.erase(it);
      }
    }
    if (match) complete(*op, *match, world_->link_gbps > 0);
    return make_request(std::move(op), box, true, peer);
  }

  Request irecv(int peer, uint32_t tag, void* data, size_t bytes) override {
    auto op = std::make_shared<Op>();
    op->source = peer;
    op->destination = rank_;
    op->tag = tag;
    op->recv_data = data;
    op->bytes = bytes;
    Mailbox& box = world_->mailboxes[rank_];
    std::shared_ptr<Op> match;
    {
      std::lock_guard lock(box.mutex);
      auto it = std::find_if(box.sends.begin(), box.sends.end(), [&](const auto& send) {
        return send->source == peer && send->tag == tag;
      });
      if (it == box.sends.end()) {
        box.recvs.push_back(op);
      } else {
        match = *it;
        box.sends.erase(it);
      }
    }
    if (match) complete(*match, *op, world_->link_gbps > 0);
    return make_request(std::move(op), box, false, peer);
  }

  bool test(Request& request) override {
    auto& handle = static_cast<Handle&>(*request.state);
    auto& op = *handle.op;
    const bool limited = world_->link_gbps > 0;
    const auto until = LinkClock::now() + kMaxBlock;
    int status = op.status.load(std::memory_order_acquire);
    if (status == kPending) {
      if (!limited || ++handle.polls <= kQuickPolls) return false;
      wait_while_pending(op.status, until);
      status = op.status.load(std::memory_order_acquire);
      if (status == kPending) return false;
    }
    if (status == kSizeMismatch) {
      bool sending = op.source == rank_;
      size_t sent = sending ? op.bytes : op.other_bytes;
      size_t expected = sending ? op.other_bytes : op.bytes;
      fail("rank {} sent {} bytes to rank {}, which expected {} (do the ranks disagree on the "
           "collective's size or type?)",
           op.source, sent, op.destination, expected);
    }
    return !limited || arrived(op, until);
  }

  std::string backend_failure() const override {
    if (!world_->poisoned.load(std::memory_order_acquire)) return {};
    std::lock_guard lock(world_->mutex);
    return world_->failure;
  }

  std::shared_ptr<SharedSegment> map_shared(std::span<const int> group, size_t bytes_per_member,
                                            uint32_t tag) override {
    // Shared memory would bypass the links: a limited world has none.
    if (world_->link_gbps > 0) return nullptr;
    // The group's first member allocates and registers the segment, then
    // tells the others (a 0-byte message) to pick it up from the registry.
    int first = group[0];
    auto key = std::make_pair(first, tag);
    std::shared_ptr<Segment> segment;
    if (rank_ == first) {
      segment = std::make_shared<Segment>(static_cast<int>(group.size()), bytes_per_member);
      if (group.size() > 1) {
        std::lock_guard lock(world_->mutex);
        world_->segments[key] = {segment, static_cast<int>(group.size()) - 1};
      }
      for (size_t i = 1; i < group.size(); ++i) isend(group[i], tag, nullptr, 0);
      return segment;
    }
    Request ready = irecv(first, tag, nullptr, 0);
    // The first member completes the 0-byte send at once (it never waits).
    while (!test(ready)) {
      if (!failure().empty()) fail("shared segment setup stopped: {}", failure());
      std::this_thread::yield();
    }
    std::lock_guard lock(world_->mutex);
    auto it = world_->segments.find(key);
    PX_CHECK(it != world_->segments.end());
    segment = it->second.first;
    if (--it->second.second == 0) world_->segments.erase(it);
    return segment;
  }

  uint64_t host_id() const override { return 0; }

 private:
  // Whether a matched op's bytes have arrived by `until`: sleeps towards its
  // due time (nothing else to do for this request), spins the last margin.
  static bool arrived(const Op& op, LinkClock::time_point until) {
    auto now = LinkClock::now();
    if (op.due <= now) return true;
    if (op.due - now > kWakeUpMargin) {
      use_precise_sleeps();
      std::this_thread::sleep_until(std::min(op.due - kWakeUpMargin, until));
      now = LinkClock::now();
    }
    if (op.due - now > kWakeUpMargin) return false;  // blocked long enough for one call
    while (LinkClock::now() < op.due) __builtin_ia32_pause();
    return true;
  }

  std::shared_ptr<World> world_;
  int rank_;
};

}  // namespace

void run_inproc(int world_size, const std::function<void(Communicator&)>& body,
                InprocOptions options) {
  if (world_size < 1) fail("run_inproc: world size {} is invalid; expected >= 1", world_size);
  if (!(options.link_gbps >= 0))
    fail("run_inproc: link_gbps {} is invalid; expected 0 (unlimited) or a positive rate",
         options.link_gbps);
  auto world = std::make_shared<World>(world_size, options.link_gbps);
  std::vector<std::thread> threads;
  threads.reserve(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        Communicator comm(std::make_shared<InprocTransport>(world, rank), options.communicator);
        body(comm);
      } catch (...) {
        std::lock_guard lock(world->mutex);
        if (!world->first_error) {
          world->first_error = std::current_exception();
          std::string what = "unknown exception";
          try {
            throw;
          } catch (const std::exception& error) {
            what = error.what();
          } catch (...) {
          }
          world->failure = fmt::format("peer rank {} failed: {}", rank, what);
          world->poisoned.store(true, std::memory_order_release);
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (world->first_error) std::rethrow_exception(world->first_error);
}

}  // namespace px::comm
