#include "comm/heartbeats.h"

#include <algorithm>

#include "core/error.h"

namespace px::comm {
namespace {

// Messages taken from one member per exchange: a peer that beat faster
// than this rank polled has queued several; the last one read wins.
constexpr int kMostTakenPerExchange = 64;

}  // namespace

Heartbeats::Heartbeats(Communicator& group, size_t message_bytes)
    : comm_(group.split(0, group.rank())), bytes_(message_bytes), tag_(comm_.fixed_tag(0)) {
  PX_CHECK_GT(message_bytes, size_t{0});
  peers_.resize(static_cast<size_t>(comm_.size()));
  for (int member = 0; member < comm_.size(); ++member) {
    if (member == comm_.rank()) continue;
    Peer& peer = peers_[static_cast<size_t>(member)];
    peer.outgoing.resize(bytes_);
    peer.incoming.resize(bytes_);
    post_receive(member);
  }
}

Heartbeats::~Heartbeats() {
  Transport& transport = comm_.transport();
  for (Peer& peer : peers_) {
    try {
      if (peer.receive.state != nullptr) transport.cancel(peer.receive);
      // A message the library holds still goes out (a finished rank's last
      // word); one no peer takes is withdrawn.
      if (peer.sending && !transport.test(peer.send)) transport.cancel(peer.send);
    } catch (const Error&) {
      // A transfer with a failed peer: nothing left to withdraw.
    }
  }
}

void Heartbeats::post_receive(int member) {
  Peer& peer = peers_[static_cast<size_t>(member)];
  peer.receive = comm_.irecv(member, tag_, peer.incoming.data(), bytes_);
}

void Heartbeats::exchange(std::span<const std::byte> message) {
  PX_CHECK_EQ(message.size(), bytes_);
  for (int member = 0; member < comm_.size(); ++member) {
    if (member == comm_.rank()) continue;
    take(member);
    Peer& peer = peers_[static_cast<size_t>(member)];
    if (!peer.broken.empty()) continue;
    // The message in flight says the same already: nothing new to send.
    peer.holding = !(peer.sending && std::ranges::equal(message, peer.outgoing));
    if (peer.holding) peer.held.assign(message.begin(), message.end());
    send_held(member);
  }
}

void Heartbeats::receive() {
  for (int member = 0; member < comm_.size(); ++member) {
    if (member == comm_.rank()) continue;
    take(member);
    send_held(member);
  }
}

bool Heartbeats::delivered() {
  Transport& transport = comm_.transport();
  bool all = true;
  for (int member = 0; member < comm_.size(); ++member) {
    Peer& peer = peers_[static_cast<size_t>(member)];
    if (member == comm_.rank()) continue;
    send_held(member);
    if (!peer.broken.empty()) continue;
    try {
      if (peer.sending && transport.test(peer.send)) peer.sending = false;
    } catch (const Error& error) {
      peer.broken = error.what();
      continue;
    }
    all = all && !peer.holding && !peer.sending;
  }
  return all;
}

void Heartbeats::take(int member) {
  Peer& peer = peers_[static_cast<size_t>(member)];
  if (!peer.broken.empty()) return;
  Transport& transport = comm_.transport();
  try {
    for (int taken = 0; taken < kMostTakenPerExchange && transport.test(peer.receive); ++taken) {
      peer.latest = peer.incoming;
      post_receive(member);
    }
  } catch (const Error& error) {
    peer.broken = error.what();
  }
}

void Heartbeats::send_held(int member) {
  Peer& peer = peers_[static_cast<size_t>(member)];
  if (!peer.holding || !peer.broken.empty()) return;
  try {
    if (peer.sending && comm_.transport().test(peer.send)) peer.sending = false;
    if (peer.sending) return;
    std::swap(peer.outgoing, peer.held);  // the one sent before is done: its buffer is free
    peer.holding = false;
    peer.send = comm_.isend(member, tag_, peer.outgoing.data(), bytes_);
    peer.sending = true;
  } catch (const Error& error) {
    peer.broken = error.what();
  }
}

std::span<const std::byte> Heartbeats::latest(int member) const {
  return peers_.at(static_cast<size_t>(member)).latest;
}

const std::string& Heartbeats::broken(int member) const { return peers_.at(static_cast<size_t>(member)).broken; }

}  // namespace px::comm
