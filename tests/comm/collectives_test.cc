// Every collective × algorithm × reduction × rank count 1..8 × element count,
// in process, against results computed directly from the inputs.
#include <gtest/gtest.h>

#include <mutex>

#include <fmt/format.h>

#include "comm/backends.h"
#include "harness.h"

namespace px::comm {
namespace {

using testing::Case;

struct Param {
  Collective collective;
  Algorithm algorithm;
  int variant = 0;  // hierarchical: ranks_per_node; sharded_parameter_server: servers
};

std::vector<Param> all_params() {
  std::vector<Param> params;
  for (Collective collective :
       {Collective::allreduce, Collective::reduce_scatter, Collective::allgather,
        Collective::broadcast, Collective::reduce, Collective::all_to_all, Collective::barrier})
    for (Algorithm algorithm : algorithms_for(collective)) {
      if (algorithm == Algorithm::native) continue;  // MPI only: see mpi_test.cc
      if (algorithm == Algorithm::hierarchical || algorithm == Algorithm::sharded_parameter_server)
        for (int variant : {0, 2, 3}) params.push_back({collective, algorithm, variant});
      else
        params.push_back({collective, algorithm});
    }
  return params;
}

bool reduces(Collective c) {
  return c == Collective::allreduce || c == Collective::reduce_scatter || c == Collective::reduce;
}

// Runs `cases` on `ranks` in-process ranks; returns the failures seen.
std::vector<std::string> run_cases(int ranks, const std::vector<Case>& cases) {
  std::mutex mutex;
  std::vector<std::string> failures;
  InprocOptions options{.communicator = {.timeout = std::chrono::milliseconds(20000)}};
  run_inproc(
      ranks,
      [&](Communicator& comm) {
        for (const Case& c : cases) {
          std::string problem = testing::run_case(comm, c);
          if (!problem.empty()) {
            std::lock_guard lock(mutex);
            failures.push_back(fmt::format("{} rank {}: {}", testing::describe(c, ranks),
                                           comm.rank(), problem));
          }
        }
      },
      options);
  return failures;
}

class EveryCollective : public ::testing::TestWithParam<Param> {};

TEST_P(EveryCollective, MatchesDirectResultOnOneToEightRanks) {
  const Param param = GetParam();
  std::vector<Reduction> ops = {Reduction::sum};
  if (reduces(param.collective)) ops = {Reduction::sum, Reduction::avg, Reduction::max, Reduction::min};
  for (int ranks = 1; ranks <= 8; ++ranks) {
    std::vector<Case> cases;
    for (Reduction op : ops)
      for (int64_t count : testing::sweep_counts()) {
        if (param.collective == Collective::all_to_all && count > 4099) continue;
        cases.push_back({.collective = param.collective, .algorithm = param.algorithm, .op = op,
                         .count = count, .ranks_per_node = param.variant,
                         .servers = param.variant});
      }
    // fp16/bf16 payloads for allreduce.
    if (param.collective == Collective::allreduce)
      for (DType dtype : {DType::f16, DType::bf16})
        for (int64_t count : {int64_t{0}, int64_t{13}, int64_t{4099}, int64_t{70001}})
          cases.push_back({.collective = param.collective, .algorithm = param.algorithm,
                           .op = Reduction::sum, .count = count, .dtype = dtype,
                           .ranks_per_node = param.variant, .servers = param.variant});
    for (const std::string& failure : run_cases(ranks, cases)) ADD_FAILURE() << failure;
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string name = fmt::format("{}_{}", collective_name(info.param.collective),
                                 algorithm_name(info.param.algorithm));
  if (info.param.variant) name += fmt::format("_{}", info.param.variant);
  return name;
}

INSTANTIATE_TEST_SUITE_P(Inproc, EveryCollective, ::testing::ValuesIn(all_params()), param_name);

// Several MiB: many pipeline segments and shared-memory stages, odd counts.
TEST(LargeBuffers, AllreduceEveryAlgorithmOnThreeAndFourRanks) {
  const int64_t count = (3 << 20) / 4 + 5;  // 3 MiB + 20 B of float32
  for (int ranks : {3, 4}) {
    std::vector<Case> cases;
    for (Algorithm algorithm : algorithms_for(Collective::allreduce))
      if (algorithm != Algorithm::native)
        cases.push_back({.collective = Collective::allreduce, .algorithm = algorithm,
                         .count = count, .ranks_per_node = 2});
    for (Collective collective : {Collective::reduce_scatter, Collective::allgather,
                                  Collective::broadcast, Collective::reduce})
      for (Algorithm algorithm : algorithms_for(collective))
        cases.push_back({.collective = collective, .algorithm = algorithm, .count = count});
    for (const std::string& failure : run_cases(ranks, cases)) ADD_FAILURE() << failure;
  }
}

// A run's algorithm applies to the collectives that implement it; the
// others choose their own (a run's --allreduce ring names its gradients'
// allreduces, not context parallelism's all-to-all).
TEST(OptionsFor, KeepsTheAlgorithmWhereTheCollectiveImplementsItElseAutomatic) {
  const CollectiveOptions ring{.algorithm = Algorithm::ring, .ranks_per_node = 2};
  EXPECT_EQ(options_for(ring, Collective::allreduce), ring);
  EXPECT_EQ(options_for(ring, Collective::reduce_scatter), ring);
  EXPECT_EQ(options_for(ring, Collective::all_to_all).algorithm, Algorithm::automatic);
  EXPECT_EQ(options_for(ring, Collective::all_to_all).ranks_per_node, 2);
  EXPECT_EQ(options_for(ring, Collective::broadcast).algorithm, Algorithm::automatic);
  const CollectiveOptions tree{.algorithm = Algorithm::tree};
  EXPECT_EQ(options_for(tree, Collective::allreduce), tree);
  EXPECT_EQ(options_for(tree, Collective::reduce_scatter).algorithm, Algorithm::automatic);
  EXPECT_EQ(options_for({}, Collective::all_to_all).algorithm, Algorithm::automatic);
}

TEST(AutomaticChoice, RunsAndMatchesForEveryCollective) {
  for (int ranks : {1, 2, 5}) {
    std::vector<Case> cases;
    for (Collective collective :
         {Collective::allreduce, Collective::reduce_scatter, Collective::allgather,
          Collective::broadcast, Collective::reduce, Collective::all_to_all, Collective::barrier})
      for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{300001}})
        cases.push_back({.collective = collective, .algorithm = Algorithm::automatic,
                         .count = collective == Collective::all_to_all ? count / 10 : count});
    for (const std::string& failure : run_cases(ranks, cases)) ADD_FAILURE() << failure;
  }
}

}  // namespace
}  // namespace px::comm
