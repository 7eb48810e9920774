// A rank that dies or stops answering must make the others fail within the
// timeout with an error naming the peer, the collective and the step; ranks
// that disagree on size or type must get an error, never wrong data.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <regex>
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
  // Some rank names rank 1: as the peer that did not answer, or, when a
  // rank waiting behind rank 1 was accused first (the parameter server's
  // workers wait on the server, which waits on rank 1), as the peer the
  // accused rank was itself waiting on.
  std::string named;
  for (int r : {0, 2}) {
    const std::string& error = outcome.errors[r];
    ASSERT_FALSE(error.empty()) << "rank " << r << " returned normally";
    EXPECT_TRUE(contains(error, "allreduce(" + std::string(algorithm_name(GetParam()))))
        << error;
    EXPECT_TRUE(contains(error, "step")) << error;
    if (std::regex_search(error, std::regex("peer rank 1 [a-z ]+ within the")) ||
        std::regex_search(error, std::regex("stopped while waiting [0-9]+ ms on peer rank 1:")))
      named = error;
  }
  EXPECT_FALSE(named.empty()) << outcome.errors[0] << "\n" << outcome.errors[2];
  EXPECT_TRUE(contains(named, "300 ms timeout")) << named;
}

TEST(FailingRank, AnAccusedRankNamesThePeerItWasWaitingOn) {
  // Rank 2 waits on rank 0 from the start; rank 0 starts waiting on rank 1,
  // which never sends, 700 ms later. Rank 2's timeout fires first and
  // accuses rank 0; rank 0's error must then say it was waiting on rank 1,
  // so the chain of waits leads to the rank that stopped.
  Outcome outcome(3);
  run_recording(3, 1000ms, outcome, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(2000ms);
      return;
    }
    float value = 0;
    Request request = comm.irecv(comm.rank() == 0 ? 1 : 0, comm.fixed_tag(7), &value, sizeof value);
    if (comm.rank() == 0) std::this_thread::sleep_for(700ms);
    comm.wait(request, {"wait-for", 0});
  });
  EXPECT_TRUE(contains(outcome.errors[2], "peer rank 0 did not answer within the 1000 ms timeout"))
      << outcome.errors[2];
  EXPECT_TRUE(std::regex_search(outcome.errors[0],
                                std::regex("wait-for step 0 on rank 0 stopped while waiting [0-9]+ ms "
                                           "on peer rank 1: peer rank 2 failed: .*peer rank 0 did not answer")))
      << outcome.errors[0];
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
