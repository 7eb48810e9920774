// The in-process link limit (InprocOptions::link_gbps): a message takes
// 8·bytes/gbps ns on its sender's serial link and is seen complete only
// then. Tolerances are generous (a shared, noisy 2-core VM): lower bounds are
// strict, upper bounds only catch "not limited at all" or "far too slow".
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <thread>

#include "comm/backends.h"
#include "comm/collectives.h"

namespace px::comm {
namespace {

using Clock = std::chrono::steady_clock;

double elapsed_ms(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

constexpr size_t kMiB = 1 << 20;
constexpr double kMiBAtOneGbpsMs = kMiB * 8.0 / 1e9 * 1e3;  // 8.39 ms

TEST(LinkLimit, OneMebibyteAtOneGigabitTakesAboutEightMillisecondsWithoutBurningCpu) {
  // The link starts when the sender posts, so both ranks' completions are
  // timed from the sender's start: the ranks leave the barrier at different
  // moments (milliseconds apart under TSan), and a receiver that leaves late
  // sees only the rest of the transfer. Each rank's CPU is set against its own wait.
  std::vector<Clock::time_point> start(2), end(2);
  std::vector<double> cpu_ms(2);
  run_inproc(
      2,
      [&](Communicator& comm) {
        std::vector<char> buffer(kMiB, 1);
        barrier(comm);
        start[comm.rank()] = Clock::now();
        const double cpu_start = thread_cpu_ms();
        const uint32_t tag = comm.next_tag();
        Request request = comm.rank() == 0 ? comm.isend(1, tag, buffer.data(), kMiB)
                                           : comm.irecv(0, tag, buffer.data(), kMiB);
        comm.wait(request, {"link test", 0});
        end[comm.rank()] = Clock::now();
        cpu_ms[comm.rank()] = thread_cpu_ms() - cpu_start;
      },
      {.communicator = {}, .link_gbps = 1.0});
  const auto ms_between = [](Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
  };
  for (int r = 0; r < 2; ++r) {
    const double since_send = ms_between(start[0], end[r]);
    const double own_wait = ms_between(start[r], end[r]);
    EXPECT_GE(since_send, kMiBAtOneGbpsMs * 0.97) << "rank " << r;
    EXPECT_LT(since_send, kMiBAtOneGbpsMs + 40) << "rank " << r;
    EXPECT_LT(cpu_ms[r], std::max(own_wait, kMiBAtOneGbpsMs) * 0.5)
        << "rank " << r << " spun while the link was busy";
  }
}

TEST(LinkLimit, ALinkIsOneSerialPipeForAllOfItsMessages) {
  double ms = 0;
  run_inproc(
      3,
      [&](Communicator& comm) {
        std::vector<char> a(kMiB), b(kMiB);
        barrier(comm);
        const uint32_t tag = comm.next_tag();
        if (comm.rank() == 0) {
          const auto start = Clock::now();
          std::vector<Request> sends{comm.isend(1, tag, a.data(), kMiB),
                                     comm.isend(2, tag, b.data(), kMiB)};
          comm.wait_all(sends, {"link test", 0});
          ms = elapsed_ms(start);
        } else {
          Request receive = comm.irecv(0, tag, a.data(), kMiB);
          comm.wait(receive, {"link test", 0});
        }
      },
      {.communicator = {}, .link_gbps = 1.0});
  EXPECT_GE(ms, 2 * kMiBAtOneGbpsMs * 0.97);
  EXPECT_LT(ms, 2 * kMiBAtOneGbpsMs + 60);
}

TEST(LinkLimit, RingAllreduceTakesAtLeastItsBytesOverTheLink) {
  // Ring: each rank sends 2(p-1)/p · n bytes.
  for (int ranks : {2, 4}) {
    double ms = 0;
    run_inproc(
        ranks,
        [&](Communicator& comm) {
          std::vector<float> data(kMiB / sizeof(float), 1.0f);
          barrier(comm);
          const auto start = Clock::now();
          allreduce(comm, data, Reduction::sum, {.algorithm = Algorithm::ring});
          if (comm.rank() == 0) ms = elapsed_ms(start);
          ASSERT_EQ(data[12345], static_cast<float>(comm.size()));
        },
        {.communicator = {}, .link_gbps = 2.0});
    const double bound = 2.0 * (ranks - 1) / ranks * kMiBAtOneGbpsMs / 2.0;
    EXPECT_GE(ms, bound * 0.97) << ranks << " ranks";
    EXPECT_LT(ms, bound * 3 + 60) << ranks << " ranks";
  }
}

TEST(LinkLimit, LimitedWorldHasNoSharedMemoryButEveryCollectiveWorks) {
  run_inproc(
      3,
      [](Communicator& comm) {
        EXPECT_EQ(comm.shared_memory(), nullptr);
        std::vector<float> data(1000, 1.0f);
        allreduce(comm, data);  // automatic: never shared_memory here
        EXPECT_EQ(data[999], 3.0f);
      },
      {.communicator = {}, .link_gbps = 10.0});
  run_inproc(2, [](Communicator& comm) { EXPECT_NE(comm.shared_memory(), nullptr); });
}

TEST(LinkLimit, NegativeRateIsRejected) {
  EXPECT_THROW(run_inproc(2, [](Communicator&) {}, {.communicator = {}, .link_gbps = -1.0}), Error);
}

}  // namespace
}  // namespace px::comm
