// Transport: point-to-point byte messages between the ranks of one world,
// the only thing collective algorithms need from a backend. Backends live in
// subfolders: inproc/ (ranks are threads of one process) and mpi/ (ranks are
// MPI processes). A Communicator (communicator.h) adds groups, tag spaces and
// timeouts on top; algorithms never talk to a Transport directly.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace px::comm {

enum class Reduction { sum, avg, max, min };

// Backend-specific state of one posted send or receive.
class RequestState {
 public:
  virtual ~RequestState() = default;
};

// A posted isend/irecv. Completed by Communicator::wait (which polls
// Transport::test until done, a timeout, or a failed peer).
struct Request {
  std::shared_ptr<RequestState> state;
  int peer = -1;  // world rank of the other side, for error messages
  bool done = false;
};

// Memory every member of a group can load and store directly: one slot of
// `bytes_per_member` bytes per member, 4096-byte aligned, zeroed on creation.
class SharedSegment {
 public:
  virtual ~SharedSegment() = default;
  virtual void* slot(int member) = 0;
  virtual size_t bytes_per_member() const = 0;
};

// The MPI library's own collectives over a group ("native" algorithm).
class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // In place over `count` elements of `dtype` (f32 only for now).
  virtual void allreduce(std::span<const int> group, void* data, int64_t count, DType dtype,
                         Reduction op) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;  // "inproc" or "mpi"
  virtual int rank() const = 0;               // world rank
  virtual int size() const = 0;               // world size

  // A tag is a communicator's context id (its top 10 bits, see
  // communicator.cc) and a sequence number. Messages between a pair of
  // ranks with equal tags match in posting order. (The MPI backend sends
  // each context on its own MPI communicator and the sequence folded into
  // the tag range the library offers: MPI guarantees only 32767.) The buffer must stay
  // valid until the request completes. A receive must post exactly the number
  // of bytes sent: test() throws px::Error on a size mismatch.
  virtual Request isend(int peer, uint32_t tag, const void* data, size_t bytes) = 0;
  virtual Request irecv(int peer, uint32_t tag, void* data, size_t bytes) = 0;
  // True once the request completed; throws px::Error if it failed.
  virtual bool test(Request& request) = 0;
  // Withdraws a request that has not completed (a receive that will never
  // be matched, before the transport goes away); its buffer is free once
  // this returns. A send already under way may still be delivered.
  virtual void cancel(Request& request) { request.state.reset(); }

  // Non-empty once some rank of the world failed (in-process poisoning) or
  // a failure was declared here; every wait then stops with this reason
  // instead of running into its timeout.
  std::string failure() const;
  // A watchdog found a rank silent (runtime/fault/watchdog.h): every wait of this
  // rank stops with `reason` from now on. Thread-safe.
  void declare_failure(const std::string& reason);

  // Collective over the world ranks in `group` (this rank among them): maps a
  // shared segment, or returns nullptr when the members do not share memory.
  // `tag` is a fresh tag of the calling communicator, used for the handshake.
  virtual std::shared_ptr<SharedSegment> map_shared(std::span<const int> group,
                                                    size_t bytes_per_member, uint32_t tag) = 0;
  // An id equal on ranks that share a host (and its memory).
  virtual uint64_t host_id() const = 0;

  // nullptr unless the backend is an MPI library.
  virtual NativeCollectives* native() { return nullptr; }

  // Context ids give every communicator its own tag space (see
  // communicator.cc); this is the smallest id this rank has not used yet.
  int next_free_context = 1;
  // Collective over `members` (world ranks, in group order; this rank among
  // them): a communicator with context id `context` is made over them.
  // Backends that separate traffic by their own communicators make one.
  virtual void open_context(int context, std::span<const int> members) {
    (void)context;
    (void)members;
  }

 protected:
  // The backend's own knowledge of a failed rank ("" if none).
  virtual std::string backend_failure() const { return {}; }

 private:
  std::atomic<bool> declared_{false};
  mutable std::mutex declared_mutex_;
  std::string declared_reason_;
};

}  // namespace px::comm
