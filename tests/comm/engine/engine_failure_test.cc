// CommEngine failures surface from wait() on the caller's thread as a
// px::Error naming the job: ranks that submit different jobs, a rank that
// fails, a rank that stops submitting. Never a hang or std::terminate.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "comm/backends.h"
#include "comm/engine/comm_engine.h"

namespace px::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs body on each rank and returns each rank's error ("" if none), instead
// of letting the first one end the run.
std::vector<std::string> errors_by_rank(int ranks, std::chrono::milliseconds timeout,
                                        const std::function<void(Communicator&)>& body) {
  std::mutex mutex;
  std::vector<std::string> errors(ranks);
  try {
    run_inproc(
        ranks,
        [&](Communicator& comm) {
          try {
            body(comm);
          } catch (const Error& error) {
            std::lock_guard lock(mutex);
            errors[comm.rank()] = error.what();
            throw;
          }
        },
        InprocOptions{.communicator = {.timeout = timeout}});
  } catch (const Error&) {
  }
  return errors;
}

TEST(EngineFailure, RanksSubmittingDifferentSizesAllGetAnErrorNamingTheJob) {
  auto errors = errors_by_rank(3, 5000ms, [](Communicator& world) {
    CommEngine engine(world);
    std::vector<float> a(100, 1.0f), b(world.rank() == 1 ? 51 : 50, 1.0f);
    engine.allreduce(a, 0, "first");
    engine.allreduce(b, 1, "second");
    engine.wait_all();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(contains(errors[r], "different jobs as job #1")) << "rank " << r << ": "
                                                                   << errors[r];
    EXPECT_TRUE(contains(errors[r], "'second'")) << errors[r];
    EXPECT_TRUE(contains(errors[r], "ranks 1 differ from rank 0")) << errors[r];
  }
}

TEST(EngineFailure, RanksSubmittingDifferentNamesOrPrioritiesGetAnError) {
  for (bool rename : {true, false}) {
    auto errors = errors_by_rank(2, 5000ms, [&](Communicator& world) {
      CommEngine engine(world);
      std::vector<float> a(10, 1.0f);
      const bool odd = world.rank() == 1;
      engine.allreduce(a, odd && !rename ? 3 : 0, odd && rename ? "other" : "grad");
      engine.wait_all();
    });
    for (int r = 0; r < 2; ++r)
      EXPECT_TRUE(contains(errors[r], "different jobs as job #0")) << errors[r];
  }
}

TEST(EngineFailure, ThrowingRankSurfacesFromWaitOnTheOthers) {
  const auto start = Clock::now();
  auto errors = errors_by_rank(3, 20000ms, [](Communicator& world) {
    CommEngine engine(world, {.slice_bytes = 400});
    std::vector<float> data(1000, 1.0f);
    auto first = engine.allreduce(data, 0, "warmup");
    engine.wait(first);
    if (world.rank() == 1) {
      // Late enough that the others have left the warm-up (a shared-memory
      // allreduce stops on a poisoned world even in its last step) and wait
      // for grad.7.
      std::this_thread::sleep_for(100ms);
      throw Error("rank 1 broke down");
    }
    engine.wait(engine.allreduce(data, 0, "grad.7"));
  });
  EXPECT_LT(Clock::now() - start, 10s) << "failed fast, not by the 20 s timeout";
  EXPECT_EQ(errors[1], "rank 1 broke down");
  for (int r : {0, 2}) {
    EXPECT_TRUE(contains(errors[r], "job #1")) << errors[r];
    EXPECT_TRUE(contains(errors[r], "'grad.7'")) << errors[r];
    EXPECT_TRUE(contains(errors[r], "peer rank 1 failed: rank 1 broke down")) << errors[r];
  }
}

TEST(EngineFailure, RankThatStopsSubmittingMakesOthersFailWithinTheTimeout) {
  const auto start = Clock::now();
  auto errors = errors_by_rank(3, 300ms, [](Communicator& world) {
    CommEngine engine(world);
    std::vector<float> data(1000, 1.0f);
    if (world.rank() == 2) {
      std::this_thread::sleep_for(1500ms);  // submits nothing
      return;
    }
    engine.wait(engine.allreduce(data, 4, "grad.0"));
  });
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_EQ(errors[2], "");
  for (int r : {0, 1}) {
    EXPECT_TRUE(contains(errors[r], "'grad.0'")) << errors[r];
    EXPECT_TRUE(contains(errors[r], "300 ms timeout")) << errors[r];
  }
  // Rank 2 must be the one named by at least one of them.
  EXPECT_TRUE(contains(errors[0] + errors[1], "peer rank 2")) << errors[0] << "\n" << errors[1];
}

TEST(EngineFailure, FailingCustomJobNamesItselfAndStopsLaterJobs) {
  auto errors = errors_by_rank(2, 5000ms, [](Communicator& world) {
    CommEngine engine(world);
    std::vector<float> data(10, 1.0f);
    auto bad = engine.submit(0, "codec", [](Communicator&) { throw Error("codec exploded"); });
    auto later = engine.allreduce(data, 1, "after");
    std::string first, second;
    try {
      engine.wait(bad);
    } catch (const Error& error) {
      first = error.what();
    }
    try {
      engine.wait(later);
    } catch (const Error& error) {
      second = error.what();
    }
    EXPECT_TRUE(contains(first, "custom job 'codec'")) << first;
    EXPECT_TRUE(contains(first, "codec exploded")) << first;
    EXPECT_TRUE(contains(second, "'after'")) << second;
    EXPECT_TRUE(contains(second, "was not run")) << second;
    // Later submissions fail at once instead of hanging.
    EXPECT_THROW(engine.wait(engine.allreduce(data, 0, "late")), Error);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace px::comm
