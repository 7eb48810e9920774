#include "runtime/parameter_server/poll.h"

#include <algorithm>
#include <thread>

#include "core/error.h"

namespace px::ps {

constexpr std::chrono::microseconds kFirstSleep{20};
constexpr std::chrono::microseconds kLongestSleep{1000};

Backoff::Backoff(comm::Communicator& comm) : comm_(comm), since_(std::chrono::steady_clock::now()) {}

void Backoff::progressed() {
  since_ = std::chrono::steady_clock::now();
  sleep_ = std::chrono::microseconds{0};
}

void Backoff::idle(std::string_view waiting_for) {
  std::string failure = comm_.transport().failure();
  if (!failure.empty()) fail("parameter server: rank {} stopped while waiting for {}: {}", comm_.rank(), waiting_for, failure);
  if (std::chrono::steady_clock::now() - since_ > comm_.timeout())
    fail("parameter server: rank {} waited {} ms for {} (timeout)", comm_.rank(), comm_.timeout().count(),
         waiting_for);
  sleep_ = sleep_.count() == 0 ? kFirstSleep : std::min(kLongestSleep, 2 * sleep_);
  std::this_thread::sleep_for(sleep_);
}

bool test(comm::Communicator& comm, comm::Request& request) {
  if (!request.state) return true;  // never posted
  if (!request.done) request.done = comm.transport().test(request);
  return request.done;
}

void await(comm::Communicator& comm, comm::Request& request, std::string_view what) {
  Backoff backoff(comm);
  while (!test(comm, request)) backoff.idle(what);
}

}  // namespace px::ps
