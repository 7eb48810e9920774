// A Transport that forwards to another and counts the bytes handed to isend,
// to check WireStats against what actually went on the wire.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/communicator.h"
#include "comm/transport.h"

namespace px::comm::compression::testing {

class CountingTransport : public Transport {
 public:
  explicit CountingTransport(Transport& inner) : inner_(inner) {}
  std::string_view name() const override { return inner_.name(); }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Request isend(int peer, uint32_t tag, const void* data, size_t bytes) override {
    bytes_sent += bytes;
    ++messages;
    return inner_.isend(peer, tag, data, bytes);
  }
  Request irecv(int peer, uint32_t tag, void* data, size_t bytes) override {
    return inner_.irecv(peer, tag, data, bytes);
  }
  bool test(Request& request) override { return inner_.test(request); }
  std::string backend_failure() const override { return inner_.failure(); }
  std::shared_ptr<SharedSegment> map_shared(std::span<const int> group, size_t bytes_per_member,
                                            uint32_t tag) override {
    return inner_.map_shared(group, bytes_per_member, tag);
  }
  uint64_t host_id() const override { return inner_.host_id(); }

  uint64_t bytes_sent = 0;
  uint64_t messages = 0;

 private:
  Transport& inner_;
};

// A world communicator over `counting` (not owned). Use it instead of the
// original world, not beside it: both draw tags from context 0.
inline Communicator counted_world(CountingTransport& counting) {
  return Communicator(std::shared_ptr<Transport>(&counting, [](Transport*) {}),
                      {.timeout = std::chrono::milliseconds(30000)});
}

}  // namespace px::comm::compression::testing
