// A rank that dies or stops answering must make the others fail within the
// timeout with an error naming the peer, the collective and the step; ranks
// that disagree on size or type must get an error, never wrong data.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "comm/backends.h"
#include "comm/collectives.h"

namespace px::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct Outcome {
  std::mutex mutex;
  std::vector<std::string> errors;  // by rank, "" if it returned normally
  explicit Outcome(int ranks) : errors(ranks) {}
};

// Runs body on each rank, recording each rank's error message instead of
// letting the first one end the run.
void run_recording(int ranks, std::chrono::milliseconds timeout, Outcome& outcome,
                   const std::function<void(Communicator&)>& body) {
  InprocOptions options{.communicator = {.timeout = timeout}};
  try {
    run_inproc(
        ranks,
        [&](Communicator& comm) {
          try {
            body(comm);
          } catch (const Error& error) {
            std::lock_guard lock(outcome.mutex);
            outcome.errors[comm.rank()] = error.what();
            throw;
          }
        },
        options);
  } catch (const Error&) {
  }
}

class FailingRank : public ::testing::TestWithParam<Algorithm> {};

TEST_P(FailingRank, FrozenRankIsNamedByItsNeighboursWithinTheTimeout) {
  Outcome outcome(3);
  const auto start = Clock::now();
  run_recording(3, 300ms, outcome, [&](Communicator& comm) {
    std::vector<float> data(100000, 1.0f);
    allreduce(comm, data, Reduction::sum, {.algorithm = GetParam()});  // a first call works
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(1500ms);  // stops answering mid-run
      return;
    }
    allreduce(comm, data, Reduction::sum, {.algorithm = GetParam()});
  });
  const auto elapsed = Clock::now() - start;
  EXPECT_LT(elapsed, 3s);
  std::string named;  // the rank(s) whose error names rank 1 directly
  for (int r : {0, 2}) {
    const std::string& error = outcome.errors[r];
    ASSERT_FALSE(error.empty()) << "rank " << r << " returned normally";
    EXPECT_TRUE(contains(error, "allreduce(" + std::string(algorithm_name(GetParam()))))
        << error;
    EXPECT_TRUE(contains(error, "step")) << error;
    if (contains(error, "peer rank 1 ")) named = error;
  }
  EXPECT_FALSE(named.empty()) << outcome.errors[0] << "\n" << outcome.errors[2];
  EXPECT_TRUE(contains(named, "300 ms timeout")) << named;
}

TEST_P(FailingRank, ThrowingRankMakesOthersFailFast) {
  Outcome outcome(4);
  const auto start = Clock::now();
  run_recording(4, 30000ms, outcome, [&](Communicator& comm) {
    std::vector<float> data(50000, 1.0f);
    if (comm.rank() == 2) fail("rank 2 ran out of memory (simulated)");
    allreduce(comm, data, Reduction::sum, {.algorithm = GetParam()});
  });
  EXPECT_LT(Clock::now() - start, 5s);  // far below the 30 s timeout
  for (int r : {0, 1, 3}) {
    // Rank 2 is not always every rank's direct peer: some ranks return
    // normally once their own part is done, the others must name rank 2.
    if (outcome.errors[r].empty()) continue;
    EXPECT_TRUE(contains(outcome.errors[r], "peer rank 2 failed: rank 2 ran out of memory"))
        << outcome.errors[r];
  }
  EXPECT_TRUE(contains(outcome.errors[2], "out of memory"));
}

INSTANTIATE_TEST_SUITE_P(
    Inproc, FailingRank,
    ::testing::Values(Algorithm::ring, Algorithm::halving_doubling, Algorithm::tree,
                      Algorithm::shared_memory, Algorithm::parameter_server),
    [](const auto& info) { return std::string(algorithm_name(info.param)); });

TEST(Disagreement, DifferentCountsGiveAClearError) {
  for (Algorithm algorithm : {Algorithm::ring, Algorithm::shared_memory, Algorithm::naive,
                              Algorithm::recursive_doubling}) {
    Outcome outcome(3);
    run_recording(3, 5000ms, outcome, [&](Communicator& comm) {
      std::vector<float> data(comm.rank() == 2 ? 1001 : 1000, 1.0f);
      allreduce(comm, data, Reduction::sum, {.algorithm = algorithm});
    });
    bool explained = false;
    for (const std::string& error : outcome.errors)
      explained |= contains(error, "disagree") || contains(error, "different collective");
    EXPECT_TRUE(explained) << algorithm_name(algorithm) << ": " << outcome.errors[0] << " | "
                           << outcome.errors[1] << " | " << outcome.errors[2];
  }
}

TEST(Disagreement, DifferentDtypesGiveAClearError) {
  Outcome outcome(2);
  run_recording(2, 5000ms, outcome, [&](Communicator& comm) {
    std::vector<uint16_t> half(1000);
    std::vector<float> full(1000);
    Buffer data = comm.rank() == 0 ? Buffer(half.data(), 1000, DType::bf16) : Buffer(full);
    allreduce(comm, data, Reduction::sum, {.algorithm = Algorithm::ring});
  });
  EXPECT_TRUE(contains(outcome.errors[0] + outcome.errors[1], "disagree"))
      << outcome.errors[0] << " | " << outcome.errors[1];
}

}  // namespace
}  // namespace px::comm
