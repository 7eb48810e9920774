// Heartbeats over the in-process transport: every member hears every
// other's latest message, on a communicator of its own (the collectives
// running beside it never see a heartbeat), and a member that stops
// exchanging keeps nobody waiting.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/backends.h"
#include "comm/collectives.h"
#include "comm/heartbeats.h"

namespace px::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBytes = 16;

// A message: its sender and a round number.
std::vector<std::byte> message(int sender, int64_t round) {
  std::vector<std::byte> bytes(kBytes);
  const int64_t fields[2] = {sender, round};
  std::memcpy(bytes.data(), fields, sizeof(fields));
  return bytes;
}
std::pair<int64_t, int64_t> fields_of(std::span<const std::byte> bytes) {
  int64_t fields[2] = {-1, -1};
  if (bytes.size() == kBytes) std::memcpy(fields, bytes.data(), sizeof(fields));
  return {fields[0], fields[1]};
}

TEST(Heartbeats, EveryMemberHearsEveryOthersLatestRoundOnFiveRanks) {
  constexpr int kRanks = 5, kRounds = 200;
  run_inproc(kRanks, [](Communicator& world) {
    Heartbeats heartbeats(world, kBytes);
    // The heartbeats run while collectives use the world: neither sees the other's messages.
    std::vector<float> data(1000, 1.0f);
    for (int round = 1; round <= kRounds; ++round) {
      heartbeats.exchange(message(world.rank(), round));
      if (round % 20 == 0) allreduce(world, data, Reduction::sum, {.algorithm = Algorithm::ring});
    }
    // Everyone has sent its last round; keep exchanging until every member
    // heard every other's. Not until this rank heard all: a round held back
    // because the last one was still in flight goes out only at a later
    // exchange or receive, so a rank that stopped early could leave a peer short.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (bool everyone = false; !everyone;) {
      heartbeats.exchange(message(world.rank(), kRounds));
      float heard_all = 1.0f;
      for (int member = 0; member < kRanks; ++member)
        if (member != world.rank() && fields_of(heartbeats.latest(member)).second != kRounds) heard_all = 0.0f;
      if (Clock::now() >= deadline) heard_all = 1.0f;  // give up together; the checks below fail
      std::vector<float> flag{heard_all};
      allreduce(world, flag, Reduction::min);
      everyone = flag[0] == 1.0f;
    }
    for (int member = 0; member < kRanks; ++member) {
      if (member == world.rank()) {
        EXPECT_TRUE(heartbeats.latest(member).empty());
        continue;
      }
      EXPECT_EQ(fields_of(heartbeats.latest(member)), std::make_pair(int64_t{member}, int64_t{kRounds}))
          << "rank " << world.rank() << " hearing " << member;
      EXPECT_EQ(heartbeats.broken(member), "");
    }
    EXPECT_EQ(data[0], 9765625.0f) << "ten sums over 5 ranks: 5^10";
    barrier(world);  // nobody withdraws its receives while a member still waits for its last round
  });
}

TEST(Heartbeats, AMemberThatStopsKeepsItsLastMessageAndBlocksNobody) {
  // Rank 1 sends one message and then stops for good (a stopped process);
  // rank 0 goes on exchanging many times without blocking and still hears
  // rank 1's last message.
  std::atomic<bool> rank0_done{false};
  run_inproc(2, [&](Communicator& world) {
    Heartbeats heartbeats(world, kBytes);
    if (world.rank() == 1) {
      heartbeats.exchange(message(1, 7));
      while (!rank0_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    const auto began = Clock::now();
    for (int round = 1; round <= 10000; ++round) {
      heartbeats.exchange(message(0, round));
      if (fields_of(heartbeats.latest(1)).second == 7) break;
      if (Clock::now() - began > std::chrono::seconds(10)) break;
      std::this_thread::yield();
    }
    EXPECT_EQ(fields_of(heartbeats.latest(1)), std::make_pair(int64_t{1}, int64_t{7}));
    for (int round = 0; round < 10000; ++round) heartbeats.exchange(message(0, 1000 + round));
    EXPECT_EQ(fields_of(heartbeats.latest(1)), std::make_pair(int64_t{1}, int64_t{7}));
    rank0_done.store(true);
  });
}

TEST(Heartbeats, ARoundSentWhileTheLastIsInFlightIsHeldBackNotDropped) {
  // Rank 0 sends rounds 1, 2, 3 before rank 1 takes any: round 1 meets the
  // receive rank 1 posted, round 2 waits in flight until rank 1 takes round
  // 1, and round 3 is held back meanwhile. Rank 0 then only receives (as a
  // finished rank's watchdog does, runtime/fault/watchdog.cc): round 3 still
  // goes out, and rank 1 hears it.
  std::atomic<bool> heard{false};
  run_inproc(2, [&](Communicator& world) {
    Heartbeats heartbeats(world, kBytes);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    if (world.rank() == 0) {
      for (int round = 1; round <= 3; ++round) heartbeats.exchange(message(0, round));
      while (!heartbeats.delivered() && Clock::now() < deadline) {
        heartbeats.receive();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_TRUE(heartbeats.delivered());
      while (!heard.load() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    while (fields_of(heartbeats.latest(0)).second != 3 && Clock::now() < deadline) {
      heartbeats.receive();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(fields_of(heartbeats.latest(0)), std::make_pair(int64_t{0}, int64_t{3}));
    heard.store(true);
  });
}

}  // namespace
}  // namespace px::comm
