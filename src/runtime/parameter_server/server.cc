#include "runtime/parameter_server/server.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "runtime/parameter_server/poll.h"

namespace px::ps {

struct Server::Peer {
  int rank = 0;
  PushHeader push_header;
  std::vector<float> gradient;  // (count)
  comm::Request push_header_recv, push_gradient_recv;
  int64_t pushes = 0;           // received
  bool held = false;            // bsp: received, waiting for the clock's other pushes
  PullRequest pull;
  comm::Request pull_recv;
  int64_t pulls = 0;            // requests received
  bool pull_pending = false;    // received, not yet answered
  int64_t pending_clock = 0;
  PullHeader reply_header;
  std::vector<float> reply;     // (count) snapshot being sent
  comm::Request reply_header_send, reply_send;
};

Server::Server(comm::Communicator& comm, const Layout& layout, ShardOptimizer& optimizer, ServerConfig config)
    : comm_(comm), layout_(layout), optimizer_(optimizer), config_(std::move(config)) {
  const size_t count = static_cast<size_t>(optimizer_.slice().count);
  peers_.resize(static_cast<size_t>(layout_.workers));
  for (int w = 0; w < layout_.workers; ++w) {
    Peer& peer = peers_[static_cast<size_t>(w)];
    peer.rank = layout_.rank_of_worker(w);
    peer.gradient.resize(count);
    peer.reply.resize(count);
  }
  if (config_.mode == "bsp") sum_.resize(count);
}

Server::~Server() = default;

int64_t Server::complete_clocks() const {
  int64_t fewest = peers_.front().pushes;
  for (const Peer& peer : peers_) fewest = std::min(fewest, peer.pushes);
  return config_.start_clock + fewest;
}

bool Server::may_answer(int64_t clock) const {
  if (config_.mode == "asp") return true;
  const int64_t bound = config_.mode == "ssp" ? config_.staleness : 0;
  return complete_clocks() >= clock - bound;
}

void Server::post_push(int worker) {
  Peer& peer = peers_[static_cast<size_t>(worker)];
  peer.push_header_recv = comm_.irecv(peer.rank, kPushHeader, &peer.push_header, sizeof(PushHeader));
  peer.push_gradient_recv =
      comm_.irecv(peer.rank, kPushGradient, peer.gradient.data(), peer.gradient.size() * sizeof(float));
}

void Server::post_pull(int worker) {
  Peer& peer = peers_[static_cast<size_t>(worker)];
  peer.pull_recv = comm_.irecv(peer.rank, kPullRequest, &peer.pull, sizeof(PullRequest));
}

void Server::receive_push(int worker, const std::function<void(int64_t, double)>& on_clock) {
  Peer& peer = peers_[static_cast<size_t>(worker)];
  const PushHeader header = peer.push_header;
  const int64_t expected = config_.start_clock + peer.pushes;
  if (header.clock != expected)
    fail("parameter server {}: worker {} pushed clock {}, expected clock {}", comm_.rank(), worker, header.clock,
         expected);
  ++peer.pushes;
  max_staleness_ = std::max(max_staleness_, header.max_staleness);
  auto& [loss, reports] = clock_losses_[header.clock];
  loss += header.weighted_loss;
  if (++reports == layout_.workers) {
    on_clock(header.clock, loss);
    clock_losses_.erase(header.clock);
  }
  const bool more = peer.pushes < config_.end_clock - config_.start_clock;
  const double lr = config_.schedule.at(header.clock);
  if (config_.mode != "bsp") {
    // One push is `rows / B` of a global batch: its gradient is weighted so
    // already, and so is its share of the weight decay.
    if (header.rows > 0)
      optimizer_.step(peer.gradient, lr, double(header.rows) / double(config_.global_batch));
    if (more) post_push(worker);
    return;
  }
  peer.held = true;  // a worker pushes clock c+1 only after pulling the clock-c update
  if (++held_ < layout_.workers) return;
  std::fill(sum_.begin(), sum_.end(), 0.0f);
  for (Peer& each : peers_)  // worker order: the sum is the same on every run
    for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += each.gradient[i];
  optimizer_.step(sum_, lr, 1.0);
  held_ = 0;
  for (int w = 0; w < layout_.workers; ++w) {
    peers_[static_cast<size_t>(w)].held = false;
    if (more) post_push(w);
  }
}

void Server::answer_pull(int worker) {
  Peer& peer = peers_[static_cast<size_t>(worker)];
  peer.reply_header.complete_clocks = complete_clocks();
  std::span<const float> params = optimizer_.params();
  std::copy(params.begin(), params.end(), peer.reply.begin());
  peer.reply_header_send = comm_.isend(peer.rank, kPullHeader, &peer.reply_header, sizeof(PullHeader));
  peer.reply_send = comm_.isend(peer.rank, kPullParams, peer.reply.data(), peer.reply.size() * sizeof(float));
  peer.pull_pending = false;
}

void Server::run(const std::function<void(int64_t, double)>& on_clock) {
  const int64_t clocks = config_.end_clock - config_.start_clock;
  if (clocks <= 0) return;
  for (int w = 0; w < layout_.workers; ++w) {
    post_push(w);
    post_pull(w);
  }
  Backoff backoff(comm_);
  auto finished = [&] {
    for (const Peer& peer : peers_)
      if (peer.pushes < clocks || peer.pulls < clocks || peer.pull_pending) return false;
    return true;
  };
  while (!finished()) {
    bool progressed = false;
    for (int w = 0; w < layout_.workers; ++w) {
      Peer& peer = peers_[static_cast<size_t>(w)];
      // Pushes first, so a pull sees every gradient that has arrived.
      if (peer.pushes < clocks && !peer.held && test(comm_, peer.push_header_recv) &&
          test(comm_, peer.push_gradient_recv)) {
        receive_push(w, on_clock);
        progressed = true;
      }
      if (peer.pulls < clocks && !peer.pull_pending && test(comm_, peer.pull_recv)) {
        peer.pending_clock = peer.pull.clock;
        peer.pull_pending = true;
        if (++peer.pulls < clocks) post_pull(w);
        progressed = true;
      }
    }
    for (int w = 0; w < layout_.workers; ++w) {
      Peer& peer = peers_[static_cast<size_t>(w)];
      // The previous reply's buffers are reused: its sends must be done.
      if (peer.pull_pending && may_answer(peer.pending_clock) && test(comm_, peer.reply_header_send) &&
          test(comm_, peer.reply_send)) {
        answer_pull(w);
        progressed = true;
      }
    }
    if (progressed) {
      backoff.progressed();
    } else {
      backoff.idle(fmt::format("the workers' pushes and pulls (clocks {} complete of {})", complete_clocks(),
                               config_.end_clock));
    }
  }
  for (Peer& peer : peers_) {
    await(comm_, peer.reply_header_send, "a worker to take its last parameters");
    await(comm_, peer.reply_send, "a worker to take its last parameters");
  }
}

}  // namespace px::ps
