// The watchdog with peers in other processes (runtime/fault/watchdog.h), heard
// through a fake WatchdogPeers: a peer whose heartbeat stops, or that never
// beats, is named within the timeout; a verdict another watchdog sends is
// taken at once; a finished peer is not silent; this rank's news, verdict
// and last phase go out; and the news survives its wire format.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/fault/watchdog.h"
#include "runtime/fault/watchdog_peers.h"

namespace px {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Peers whose news the test sets; a live one's heartbeat moves each time it is read.
class FakePeers : public WatchdogPeers {
 public:
  void exchange(const WatchdogNews& mine) override {
    std::lock_guard lock(mutex_);
    sent_.push_back(mine);
  }
  void receive() override {}
  std::optional<WatchdogNews> heard(int rank) const override {
    std::lock_guard lock(mutex_);
    auto it = news_.find(rank);
    if (it == news_.end()) return std::nullopt;
    if (live_.at(rank)) ++it->second.pulse.heartbeat;
    return it->second;
  }
  void set(int rank, WatchdogNews news, bool live) {
    std::lock_guard lock(mutex_);
    news_[rank] = std::move(news);
    live_[rank] = live;
  }
  void stop(int rank) {
    std::lock_guard lock(mutex_);
    live_[rank] = false;
  }
  std::vector<WatchdogNews> sent() const {
    std::lock_guard lock(mutex_);
    return sent_;
  }

 private:
  mutable std::mutex mutex_;
  mutable std::map<int, WatchdogNews> news_;
  std::map<int, bool> live_;
  std::vector<WatchdogNews> sent_;
};

WatchdogNews running_at(int64_t step) {
  return {.pulse = {.heartbeat = 1, .phase = RankPhase::running, .step = step, .instr = 4, .instr_name = "grad"}};
}

// Waits until the watchdog declares a failure or `most` passes; returns how long it took.
double seconds_until_failure(const Watchdog& watchdog, std::chrono::milliseconds most) {
  const auto began = Clock::now();
  while (watchdog.failure().empty() && Clock::now() - began < most) std::this_thread::sleep_for(5ms);
  return std::chrono::duration<double>(Clock::now() - began).count();
}

TEST(Watchdog, NamesAPeerProcessWhoseHeartbeatStopsWithinTheTimeoutAndTellsTheOthers) {
  FlightRecorder recorder("", 0, 3);
  FakePeers peers;
  peers.set(1, running_at(7), true);
  peers.set(2, running_at(7), true);
  Watchdog watchdog({.timeout = 300ms}, {{&recorder, nullptr}}, 3, &peers);
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(watchdog.failure(), "") << "two live peers";
  peers.stop(2);
  const double seconds = seconds_until_failure(watchdog, 3000ms);
  const std::string failure = watchdog.failure();
  EXPECT_NE(failure.find("rank 2 is silent: no heartbeat for"), std::string::npos) << failure;
  EXPECT_NE(failure.find("it was last at step 7, instruction #4 'grad'"), std::string::npos) << failure;
  EXPECT_LT(seconds, 0.3 + 0.5) << "the timeout and a few periods of 30 ms";
  EXPECT_EQ(recorder.read().suspect, 2);
  std::this_thread::sleep_for(100ms);
  const std::vector<WatchdogNews> sent = peers.sent();
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent.back().verdict, failure) << "the verdict travels with the news";
  EXPECT_EQ(sent.back().suspect, 2);
  EXPECT_GT(sent.back().pulse.heartbeat, sent.front().pulse.heartbeat) << "this rank's own heartbeat goes out";
}

TEST(Watchdog, NamesAPeerProcessNeverHeardFromAfterTheTimeout) {
  FlightRecorder recorder("", 0, 2);
  FakePeers peers;
  Watchdog watchdog({.timeout = 300ms}, {{&recorder, nullptr}}, 2, &peers);
  const double seconds = seconds_until_failure(watchdog, 3000ms);
  EXPECT_NE(watchdog.failure().find("rank 1 is silent: it has sent no heartbeat within the 0.3 s timeout"),
            std::string::npos)
      << watchdog.failure();
  EXPECT_GT(seconds, 0.25);
  EXPECT_LT(seconds, 1.0);
}

TEST(Watchdog, TakesAVerdictAnotherWatchdogSendsAtOnce) {
  FlightRecorder recorder("", 0, 3);
  FakePeers peers;
  peers.set(1, running_at(3), true);
  WatchdogNews accuser = running_at(3);
  accuser.verdict = "rank 1 is silent: no heartbeat for 5.0 s (timeout 5.0 s); it was last at the start of step 3";
  accuser.suspect = 1;
  accuser.suspect_heard_ns = 123456789;
  peers.set(2, accuser, true);
  Watchdog watchdog({.timeout = 5000ms}, {{&recorder, nullptr}}, 3, &peers);
  const double seconds = seconds_until_failure(watchdog, 3000ms);
  EXPECT_EQ(watchdog.failure(), accuser.verdict + " (declared by rank 2)");
  EXPECT_LT(seconds, 1.0) << "long before this watchdog's own 5 s timeout";
  std::this_thread::sleep_for(700ms);  // the next period (500 ms) sends it on
  EXPECT_EQ(peers.sent().back().verdict, accuser.verdict) << "passed on as it was reached, not re-attributed";
  const FlightDump dump = recorder.read();
  EXPECT_EQ(dump.suspect, 1);
  EXPECT_EQ(dump.suspect_heard_ns, 123456789);
}

TEST(Watchdog, APeerThatFinishedIsNotSilentAndThisRanksLastPhaseGoesOut) {
  FlightRecorder recorder("", 0, 2);
  FakePeers peers;
  WatchdogNews finished = running_at(20);
  finished.pulse.phase = RankPhase::finished;
  peers.set(1, finished, false);
  {
    Watchdog watchdog({.timeout = 200ms}, {{&recorder, nullptr}}, 2, &peers);
    std::this_thread::sleep_for(800ms);
    EXPECT_EQ(watchdog.failure(), "");
    recorder.set_phase(RankPhase::finished);
  }
  ASSERT_FALSE(peers.sent().empty());
  EXPECT_EQ(peers.sent().back().pulse.phase, RankPhase::finished);
}

TEST(WatchdogNews, SurvivesTheWireWithLongTextsCutToFit) {
  WatchdogNews news;
  news.pulse = {.heartbeat = 1ull << 40, .phase = RankPhase::failed, .step = 1234567, .instr = 89};
  news.pulse.instr_name = std::string(300, 'n');
  news.verdict = std::string(2000, 'v');
  news.suspect = 5;
  news.suspect_heard_ns = -42;
  const std::vector<std::byte> bytes = encode_news(news);
  EXPECT_EQ(bytes.size(), TransportPeers::kMessageBytes);
  const std::optional<WatchdogNews> back = decode_news(bytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->pulse.heartbeat, news.pulse.heartbeat);
  EXPECT_EQ(back->pulse.phase, RankPhase::failed);
  EXPECT_EQ(back->pulse.step, 1234567);
  EXPECT_EQ(back->pulse.instr, 89);
  EXPECT_EQ(back->pulse.instr_name, std::string(96, 'n'));
  EXPECT_GT(back->verdict.size(), 300u);
  EXPECT_EQ(back->verdict, std::string(back->verdict.size(), 'v'));
  EXPECT_EQ(back->suspect, 5);
  EXPECT_EQ(back->suspect_heard_ns, -42);
  EXPECT_FALSE(decode_news(std::vector<std::byte>(TransportPeers::kMessageBytes)).has_value())
      << "zeroed bytes are no news";
}

}  // namespace
}  // namespace px
