#include "runtime/parameter_server/server.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "parallel/row_split.h"
#include "runtime/parameter_server/poll.h"

namespace px::ps {

// What the server waits for from one worker next.
enum class Expect {
  kHeader,    // a WorkerHeader (its receive is posted)
  kGradient,  // the gradient of the push whose header arrived (its receive is posted)
  kAnswer,    // nothing: a pull arrived and waits for the gate
  kNothing,   // the worker has sent its last message
};

struct Server::Peer {
  int rank = 0;
  Expect expect = Expect::kHeader;
  WorkerHeader header;          // receive buffer
  comm::Request header_recv;
  WorkerHeader push;            // the push being received or held
  std::vector<float> gradient;  // (count) its shard of the weighted gradient
  comm::Request gradient_recv;
  int64_t pushes = 0;           // received
  int64_t last_pushed = -1;     // the clock of the last push received
  bool held = false;            // bsp: a push of next_clock_, waiting for the clock's update
  int64_t dropped = 0;          // bsp: pushes left out of their clock's update
  int64_t pull_clock = 0;       // Expect::kAnswer: the clock asked for
  PullHeader reply_header;
  std::vector<float> reply;     // (count) snapshot being sent
  comm::Request reply_header_send, reply_send;
};

Server::Server(comm::Communicator& comm, const Layout& layout, ServerSlice& slice, ServerConfig config)
    : comm_(comm), layout_(layout), slice_(slice), config_(std::move(config)) {
  const size_t count = static_cast<size_t>(slice_.slice().count);
  peers_.resize(static_cast<size_t>(layout_.workers));
  for (int w = 0; w < layout_.workers; ++w) {
    Peer& peer = peers_[static_cast<size_t>(w)];
    peer.rank = layout_.rank_of_worker(w);
    peer.gradient.resize(count);
    peer.reply.resize(count);
  }
  if (bsp()) {
    PX_CHECK(config_.backup_workers >= 0 && config_.backup_workers < layout_.workers);
    sum_.resize(count);
    next_clock_ = config_.start_clock;
    follows_ = comm_.rank() != 0 && config_.backup_workers > 0;
    if (follows_) decision_.resize(decision_size(layout_, config_.backup_workers));
  }
}

Server::~Server() = default;

std::vector<int64_t> Server::dropped_pushes() const {
  std::vector<int64_t> out;
  for (const Peer& peer : peers_) out.push_back(peer.dropped);
  return out;
}

int64_t Server::complete_clocks() const {
  if (bsp()) return next_clock_;
  int64_t fewest = peers_.front().pushes;
  for (const Peer& peer : peers_) fewest = std::min(fewest, peer.pushes);
  return config_.start_clock + fewest;
}

bool Server::may_answer(int64_t clock) const {
  if (config_.mode == "asp") return true;
  const int64_t bound = config_.mode == "ssp" ? config_.staleness : 0;
  return complete_clocks() >= clock - bound;
}

void Server::listen(int worker) {
  Peer& peer = peers_[static_cast<size_t>(worker)];
  peer.header_recv = comm_.irecv(peer.rank, kWorkerHeader, &peer.header, sizeof(WorkerHeader));
  peer.expect = Expect::kHeader;
}

void Server::post_decision() {
  decision_recv_ = comm_.irecv(0, kDecision, decision_.data(), decision_.size() * sizeof(int64_t));
}

void Server::receive_header(int worker) {
  Peer& peer = peers_[static_cast<size_t>(worker)];
  if (peer.header.kind == WorkerHeader::kPull) {
    peer.pull_clock = peer.header.clock;
    peer.expect = Expect::kAnswer;
    return;
  }
  if (peer.header.kind != WorkerHeader::kPush)
    fail("parameter server {}: worker {} sent a message of unknown kind {}, expected a pull (0) or a push (1)",
         comm_.rank(), worker, static_cast<int64_t>(peer.header.kind));
  // A worker pushes clock c only after every server applied clock c-1, so its
  // previous push is no longer held.
  PX_CHECK(!peer.held, "worker {} pushed again while its clock-{} push is held", worker, peer.push.clock);
  peer.push = peer.header;
  peer.gradient_recv =
      comm_.irecv(peer.rank, kPushGradient, peer.gradient.data(), peer.gradient.size() * sizeof(float));
  peer.expect = Expect::kGradient;
}

void Server::receive_push(int worker, const std::function<void(int64_t, double)>& on_clock) {
  Peer& peer = peers_[static_cast<size_t>(worker)];
  const WorkerHeader push = peer.push;
  const int64_t expected = bsp() ? std::max(peer.last_pushed + 1, config_.start_clock)
                                 : config_.start_clock + peer.pushes;
  if (push.clock < expected || push.clock >= config_.end_clock || (!bsp() && push.clock != expected))
    fail("parameter server {}: worker {} pushed clock {}, expected clock {}{} (clocks end at {})", comm_.rank(),
         worker, push.clock, bsp() ? "at least " : "", expected, config_.end_clock);
  peer.last_pushed = push.clock;
  ++peer.pushes;
  max_staleness_ = std::max(max_staleness_, push.max_staleness);
  // A worker's last message is its push of the last clock (asp/ssp: of its
  // last clock; bsp workers that fell behind may end on a pull instead).
  const bool last = bsp() ? push.clock == config_.end_clock - 1
                          : peer.pushes == config_.end_clock - config_.start_clock;
  if (last) {
    peer.expect = Expect::kNothing;
  } else {
    listen(worker);
  }

  if (bsp()) {
    if (push.clock < next_clock_) {  // its clock's update is decided: too late
      ++peer.dropped;
      return;
    }
    if (push.clock > next_clock_)
      fail("parameter server {}: worker {} pushed clock {} before clock {} was applied", comm_.rank(), worker,
           push.clock, next_clock_);
    peer.held = true;
    if (!follows_) {
      if (worker == config_.late_worker && comm_.rank() == 0) {
        late_arrived_ = true;
      } else {
        arrived_.push_back(worker);
      }
    }
    return;
  }

  auto& [loss, reports] = clock_losses_[push.clock];
  loss += push.weighted_loss;
  if (++reports == layout_.workers) {
    on_clock(push.clock, loss);
    clock_losses_.erase(push.clock);
  }
  // One push is `rows / B` of a global batch: its gradient is weighted so
  // already, and so is its share of the weight decay.
  if (push.rows > 0)
    slice_.step(peer.gradient, config_.schedule.at(push.clock), double(push.rows) / double(push.global_rows));
}

std::vector<int> Server::chosen_workers() {
  const size_t needed = static_cast<size_t>(layout_.workers - config_.backup_workers);
  std::vector<int> order = arrived_;
  // Tests: the late worker's push counts as arriving after every other one's.
  if (late_arrived_ && arrived_.size() + 1 == static_cast<size_t>(layout_.workers))
    order.push_back(config_.late_worker);
  if (order.size() < needed) return {};
  order.resize(needed);
  std::sort(order.begin(), order.end());
  return order;
}

bool Server::try_update(const std::function<void(int64_t, double)>& on_clock) {
  if (!bsp() || next_clock_ >= config_.end_clock) return false;
  std::vector<int> chosen;
  if (follows_) {
    if (!test(comm_, decision_recv_)) return false;
    PX_CHECK_EQ(decision_[0], next_clock_);
    for (size_t i = 1; i < decision_.size(); ++i) {
      const int worker = static_cast<int>(decision_[i]);
      if (!peers_[static_cast<size_t>(worker)].held) return false;  // a chosen push is still on its way
      chosen.push_back(worker);
    }
  } else {
    chosen = chosen_workers();
    if (chosen.empty()) return false;
  }
  update(chosen, on_clock);
  return true;
}

void Server::update(const std::vector<int>& chosen, const std::function<void(int64_t, double)>& on_clock) {
  const int64_t clock = next_clock_;
  if (!follows_ && config_.backup_workers > 0 && layout_.servers > 1) {
    DecisionSend& decision = decision_sends_.emplace_back();
    decision.message.push_back(clock);
    for (int worker : chosen) decision.message.push_back(worker);
    for (int j = 1; j < layout_.servers; ++j)
      decision.sends.push_back(
          comm_.isend(j, kDecision, decision.message.data(), decision.message.size() * sizeof(int64_t)));
  }
  std::fill(sum_.begin(), sum_.end(), 0.0f);
  double loss = 0;
  int64_t full_rows = 0;    // the rows the chosen workers' shards hold of the clock's global batch
  int64_t global_rows = 0;  // B, or fewer for an epoch's partial last batch
  for (int worker : chosen) {  // worker order: the sum is the same on every run and every server
    const Peer& peer = peers_[static_cast<size_t>(worker)];
    for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += peer.gradient[i];
    loss += peer.push.weighted_loss;
    global_rows = peer.push.global_rows;
    full_rows += parallel::shard_rows(global_rows, worker, layout_.workers).size();
  }
  // Each push is weighted rows / B, so W - b of them sum to full_rows / B of
  // a global batch's gradient: rescaled, the update is the mean gradient over
  // the rows that arrived (Chen et al. 2016), and so is the logged loss.
  // With every push in, full_rows = B and nothing changes.
  if (full_rows != global_rows && full_rows > 0) {
    const double scale = double(global_rows) / double(full_rows);
    for (float& value : sum_) value = static_cast<float>(value * scale);
    loss *= scale;
  }
  slice_.step(sum_, config_.schedule.at(clock), 1.0);
  gradients_per_update_.push_back(static_cast<int>(chosen.size()));
  for (int w = 0; w < layout_.workers; ++w) {
    Peer& peer = peers_[static_cast<size_t>(w)];
    if (peer.held && !std::binary_search(chosen.begin(), chosen.end(), w)) ++peer.dropped;
    peer.held = false;
  }
  arrived_.clear();
  late_arrived_ = false;
  ++next_clock_;
  if (follows_ && next_clock_ < config_.end_clock) post_decision();
  on_clock(clock, loss);
}

void Server::answer_pull(int worker) {
  Peer& peer = peers_[static_cast<size_t>(worker)];
  peer.reply_header.complete_clocks = complete_clocks();
  std::span<const float> params = slice_.params();
  std::copy(params.begin(), params.end(), peer.reply.begin());
  peer.reply_header_send = comm_.isend(peer.rank, kPullHeader, &peer.reply_header, sizeof(PullHeader));
  peer.reply_send = comm_.isend(peer.rank, kPullParams, peer.reply.data(), peer.reply.size() * sizeof(float));
  // bsp: parameters with every clock applied end a worker's run, wherever it was.
  if (bsp() && peer.reply_header.complete_clocks >= config_.end_clock) {
    peer.expect = Expect::kNothing;
  } else {
    listen(worker);
  }
}

bool Server::finished() const {
  for (const Peer& peer : peers_)
    if (peer.expect != Expect::kNothing) return false;
  return !bsp() || next_clock_ >= config_.end_clock;
}

void Server::run(const std::function<void(int64_t, double)>& on_clock) {
  if (config_.end_clock <= config_.start_clock) return;
  for (int w = 0; w < layout_.workers; ++w) listen(w);
  if (follows_) post_decision();
  Backoff backoff(comm_);
  while (!finished()) {
    bool progressed = try_update(on_clock);  // followers: a decision may have come
    for (int w = 0; w < layout_.workers; ++w) {
      Peer& peer = peers_[static_cast<size_t>(w)];
      if (peer.expect == Expect::kHeader && test(comm_, peer.header_recv)) {
        receive_header(w);
        progressed = true;
      }
      if (peer.expect == Expect::kGradient && test(comm_, peer.gradient_recv)) {
        receive_push(w, on_clock);
        // At once, so the update takes the first pushes to arrive.
        try_update(on_clock);
        progressed = true;
      }
    }
    // After the pushes, so a pull sees every gradient that has arrived.
    for (int w = 0; w < layout_.workers; ++w) {
      Peer& peer = peers_[static_cast<size_t>(w)];
      // The previous reply's buffers are reused: its sends must be done.
      if (peer.expect == Expect::kAnswer && may_answer(peer.pull_clock) && test(comm_, peer.reply_header_send) &&
          test(comm_, peer.reply_send)) {
        answer_pull(w);
        progressed = true;
      }
    }
    while (!decision_sends_.empty() &&
           std::all_of(decision_sends_.front().sends.begin(), decision_sends_.front().sends.end(),
                       [&](comm::Request& send) { return test(comm_, send); }))
      decision_sends_.pop_front();
    if (progressed) {
      backoff.progressed();
    } else {
      backoff.idle(fmt::format("the workers' pulls and pushes{} (clocks {} complete of {})",
                               follows_ ? " and server 0's choice of pushes" : "", complete_clocks(),
                               config_.end_clock));
    }
  }
  for (Peer& peer : peers_) {
    await(comm_, peer.reply_header_send, "a worker to take its last parameters");
    await(comm_, peer.reply_send, "a worker to take its last parameters");
  }
  for (DecisionSend& decision : decision_sends_)
    for (comm::Request& send : decision.sends) await(comm_, send, "another server to take the last choice of pushes");
  decision_sends_.clear();
}

}  // namespace px::ps
