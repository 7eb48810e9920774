// Waiting without burning a core: parameter-server ranks share the machine's
// cores with workers that compute, so an idle rank polls its requests with
// Transport::test and sleeps between polls (20 us, doubling to 1 ms).
#pragma once

#include <chrono>
#include <string_view>

#include "comm/communicator.h"

namespace px::ps {

class Backoff {
 public:
  explicit Backoff(comm::Communicator& comm);
  // Called after a poll that found nothing to do; throws px::Error when a
  // rank failed or nothing progressed for the communicator's timeout.
  // `waiting_for` names what is awaited, for the message.
  void idle(std::string_view waiting_for);
  // Called after a poll that made progress.
  void progressed();

 private:
  comm::Communicator& comm_;
  std::chrono::steady_clock::time_point since_;
  std::chrono::microseconds sleep_{0};
};

// Tests `request` until done, backing off; `what` names it for errors.
bool test(comm::Communicator& comm, comm::Request& request);
void await(comm::Communicator& comm, comm::Request& request, std::string_view what);

}  // namespace px::ps
