#include "runtime/sync/coordinator.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace px::sync {

Coordinator::Coordinator(comm::Communicator control, const SchedulerConfig& schedule, double straggler_threshold,
                         int64_t units_per_row, std::string noun, LeadOutput& out)
    : control_(std::move(control)),
      noun_(std::move(noun)),
      scheduler_(schedule),
      scores_(schedule.ranks, straggler_threshold),
      units_per_row_(units_per_row),
      out_(out),
      loss_(static_cast<size_t>(schedule.ranks), 0.0),
      rows_(static_cast<size_t>(schedule.ranks), 0),
      sent_(static_cast<size_t>(schedule.ranks)),
      sends_(static_cast<size_t>(schedule.ranks)) {
  rows_announced_ = scheduler_.rows();
  thread_ = std::thread([this] {
    try {
      run();
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  });
}

Coordinator::~Coordinator() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

CoordinatorReport Coordinator::finish() {
  if (thread_.joinable()) thread_.join();
  if (!error_.empty()) fail("partial reduce's coordinator (rank 0): {}", error_);
  report_.stragglers = scores_.summary();
  report_.mean_group = report_.rounds > 0 ? double(members_total_) / double(report_.rounds) : 0;
  return std::move(report_);
}

void Coordinator::run() {
  const int n = control_.size();
  std::vector<ReadyMessage> inbox(static_cast<size_t>(n));
  std::vector<comm::Request> posted(static_cast<size_t>(n));
  comm::Transport& transport = control_.transport();
  for (int r = 0; r < n; ++r) posted[static_cast<size_t>(r)] = control_.irecv(r, kReadyTag, &inbox[static_cast<size_t>(r)], sizeof(ReadyMessage));
  auto sends_done = [&] {
    for (comm::Request& s : sends_)
      if (s.state && !s.done) s.done = transport.test(s);
    return std::all_of(sends_.begin(), sends_.end(), [](const comm::Request& s) { return !s.state || s.done; });
  };
  std::chrono::microseconds sleep{0};
  while (!stop_ && !(scheduler_.stopped() && sends_done())) {
    bool progressed = false;
    for (int r = 0; r < n && !scheduler_.stopped(); ++r) {
      comm::Request& request = posted[static_cast<size_t>(r)];
      if (!request.state || !transport.test(request)) continue;
      request = {};
      const ReadyMessage message = inbox[static_cast<size_t>(r)];
      receive(r, message);
      if (scheduler_.live(r))
        request = control_.irecv(r, kReadyTag, &inbox[static_cast<size_t>(r)], sizeof(ReadyMessage));
      progressed = true;
    }
    while (std::optional<Round> round = scheduler_.next()) {
      announce(*round);
      progressed = true;
    }
    if (progressed) {
      sleep = std::chrono::microseconds{0};
      continue;
    }
    const std::string failure = transport.failure();
    if (!failure.empty()) fail("stopped while waiting for the replicas: {}", failure);
    // Block, not spin: the ranks share cores (and CPU quotas) with this thread.
    sleep = std::min(std::chrono::microseconds{1000}, sleep.count() == 0 ? std::chrono::microseconds{20} : 2 * sleep);
    std::this_thread::sleep_for(sleep);
  }
  for (comm::Request& request : posted)
    if (request.state) transport.cancel(request);
}

void Coordinator::receive(int rank, const ReadyMessage& message) {
  if (message.kind == ReadyMessage::kLeave) {
    scheduler_.leave(rank);
    scores_.leave(rank);
    const std::string reason(message.reason, strnlen(message.reason, sizeof(message.reason)));
    report_.left.push_back(fmt::format("{} {} at its step {}: {}", noun_, rank, message.steps, reason));
    out_.say(fmt::format("partial reduce: {} {} left at its step {} ({}); {} replica{} go on", noun_, rank, message.steps,
                         reason, scheduler_.live_count(), scheduler_.live_count() == 1 ? "" : "s"));
    out_.write({{"left", rank}, {"at_step", message.steps}, {"reason", reason}, {"step", scheduler_.global_step()}});
    return;
  }
  PX_CHECK_EQ(message.kind, ReadyMessage::kReady);
  scheduler_.ready(rank, message.steps, message.rows);
  loss_[static_cast<size_t>(rank)] = message.loss;
  rows_[static_cast<size_t>(rank)] = message.rows;
  if (const std::optional<StragglerChange> change = scores_.record(rank, message.compute_s, message.wait_s)) {
    out_.say(change->straggling
                 ? fmt::format("straggler: {} {} steps {:.2f}x as long as the fastest {} ({:.2f}x its own best) "
                               "over its last {} steps",
                               noun_, rank, change->score, noun_, change->vs_best, kRecentSteps)
                 : fmt::format("straggler: {} {} recovered ({:.2f}x the fastest {})", noun_, rank, change->score,
                               noun_));
    out_.write({{"straggler", rank}, {"straggling", change->straggling}, {"score", change->score},
                {"vs_best", change->vs_best}, {"step", scheduler_.global_step()}});
  }
}

void Coordinator::announce(const Round& round) {
  const RoundMessage message{.index = round.index,
                             .members = round.members,
                             .global_step = round.global_step,
                             .flags = (round.full ? RoundMessage::kFull : 0) |
                                      (round.evaluate ? RoundMessage::kEvaluate : 0) |
                                      (round.save ? RoundMessage::kSave : 0) | (round.stop ? RoundMessage::kStop : 0)};
  const std::vector<int> members = members_of(round.members);
  // Staleness-aware weights: rows over one plus the versions behind.
  auto weight = [&](int r) {
    return double(rows_[static_cast<size_t>(r)]) / double(1 + round.behind[static_cast<size_t>(r)]);
  };
  double total = 0;
  for (const int r : members) total += weight(r);
  double loss = 0;
  int64_t rows = 0;
  for (const int r : members) {
    loss += loss_[static_cast<size_t>(r)] * double(rows_[static_cast<size_t>(r)]);
    rows += rows_[static_cast<size_t>(r)];
    comm::Request& send = sends_[static_cast<size_t>(r)];
    // The last round's send to r completed before r could report again.
    if (send.state) control_.wait(send, {"partial reduce round", static_cast<int>(round.index)});
    sent_[static_cast<size_t>(r)] = message;
    sent_[static_cast<size_t>(r)].weight = weight(r);
    sent_[static_cast<size_t>(r)].total = total;
    send = control_.isend(r, kRoundTag, &sent_[static_cast<size_t>(r)], sizeof(RoundMessage));
  }
  loss = rows > 0 ? loss / double(rows) : 0;
  ++report_.rounds;
  members_total_ += static_cast<int64_t>(members.size());
  report_.max_staleness = std::max(report_.max_staleness, round.staleness);
  report_.losses.push_back(loss);
  std::vector<double> scores;
  for (int r = 0; r < control_.size(); ++r) scores.push_back(scheduler_.live(r) ? scores_.score(r) : 0.0);
  nlohmann::json line{{"step", round.global_step}, {"round", round.index}, {"group", members},
                      {"staleness", round.staleness}, {"train_loss", loss}, {"scores", scores}};
  if (round.full) line["full"] = true;
  out_.write(line);
  const int64_t computed = scheduler_.rows() - rows_announced_;
  rows_announced_ = scheduler_.rows();
  out_.progress(std::max<int64_t>(round.global_step, 1), loss, computed * units_per_row_);
}

}  // namespace px::sync
