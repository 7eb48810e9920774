// The collectives under mpirun: every collective × algorithm (native
// included) × reduction × count on the launched ranks, plus sub-groups.
// Run: mpirun --oversubscribe -np 3 px_comm_mpi_tests (CTest does 3, 4, 5).
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/backends.h"
#include "harness.h"

namespace px::comm {
namespace {

using testing::Case;

// Runs cases on `comm`; every rank learns whether any rank failed.
void expect_all_pass(Communicator& comm, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    std::string problem = testing::run_case(comm, c);
    EXPECT_EQ(problem, "") << testing::describe(c, comm.size()) << " on rank " << comm.rank();
  }
}

TEST(Mpi, WorldHasTheRanksMpirunStarted) {
  // A binary built for one MPI and launched by another's mpirun runs P
  // singletons; this catches it.
  // OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE, MPICH's hydra PMI_SIZE.
  const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (launched == nullptr) launched = std::getenv("PMI_SIZE");
  ASSERT_NE(launched, nullptr) << "run under mpirun or mpiexec";
  EXPECT_EQ(mpi::world().size(), std::atoi(launched));
  EXPECT_GT(mpi::world().size(), 1);
}

TEST(Mpi, EveryCollectiveAlgorithmAndReductionMatches) {
  Communicator& world = mpi::world();
  std::vector<Case> cases;
  for (Collective collective :
       {Collective::allreduce, Collective::reduce_scatter, Collective::allgather,
        Collective::broadcast, Collective::reduce, Collective::all_to_all, Collective::barrier})
    for (Algorithm algorithm : algorithms_for(collective)) {
      bool reducing = collective == Collective::allreduce ||
                      collective == Collective::reduce_scatter || collective == Collective::reduce;
      for (Reduction op : {Reduction::sum, Reduction::avg, Reduction::max, Reduction::min}) {
        if (!reducing && op != Reduction::sum) continue;
        for (int64_t count : testing::sweep_counts())
          cases.push_back({.collective = collective, .algorithm = algorithm, .op = op,
                           .count = count, .ranks_per_node = 2, .servers = 2});
      }
      if (collective == Collective::allreduce && algorithm != Algorithm::native)
        for (DType dtype : {DType::f16, DType::bf16})
          cases.push_back({.collective = collective, .algorithm = algorithm, .count = 4099,
                           .dtype = dtype, .ranks_per_node = 2});
    }
  // Several MiB for the allreduce algorithms.
  for (Algorithm algorithm : algorithms_for(Collective::allreduce))
    cases.push_back({.collective = Collective::allreduce, .algorithm = algorithm,
                     .count = (3 << 20) / 4 + 5});
  expect_all_pass(world, cases);
}

TEST(Mpi, SubGroupsRunTheirOwnCollectives) {
  Communicator& world = mpi::world();
  Communicator halves = world.split(world.rank() % 2, -world.rank());
  std::vector<Case> cases;
  for (Algorithm algorithm : {Algorithm::ring, Algorithm::shared_memory, Algorithm::native,
                              Algorithm::halving_doubling, Algorithm::hierarchical})
    cases.push_back({.collective = Collective::allreduce, .algorithm = algorithm, .count = 1001});
  expect_all_pass(halves, cases);
  expect_all_pass(world, cases);
}

// More calls on one communicator than the smallest tag range MPI
// guarantees (32767; run under PARALLAX_MPI_TAG_UB=32767 too): sequences
// fold into it, and a sub-group's traffic never meets the world's with
// the same sequence numbers, since each context has its own MPI
// communicator.
TEST(Mpi, MoreCallsThanTheStandardTagRangeStayMatched) {
  Communicator& world = mpi::world();
  Communicator halves = world.split(world.rank() % 2, world.rank());
  for (int call = 0; call < 70000; ++call) {  // 35000 on each communicator
    float mine[2] = {static_cast<float>(world.rank() + call), 1.0f};
    Communicator& on = call % 2 == 0 ? halves : world;
    allreduce(on, std::span<float>(mine, 2), Reduction::sum, {.algorithm = Algorithm::ring});
    float expected = 0;
    for (int r = 0; r < world.size(); ++r)
      if (&on == &world || r % 2 == world.rank() % 2) expected += static_cast<float>(r + call);
    ASSERT_EQ(mine[0], expected) << "call " << call;
    ASSERT_EQ(mine[1], static_cast<float>(on.size())) << "call " << call;
  }
}

}  // namespace
}  // namespace px::comm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // PARALLAX_MPI_TAG_UB: only this tag range (CTest's standard_tags case).
  const char* tag_bound = std::getenv("PARALLAX_MPI_TAG_UB");
  px::comm::mpi::init(&argc, &argv, {.timeout = std::chrono::milliseconds(30000)},
                      {.tag_bound = tag_bound ? std::atoi(tag_bound) : 0});
  const int rank = px::comm::mpi::world().rank();
  if (rank != 0) {  // one rank reports; the others only add failures
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0;
  // Every rank's verdict decides the exit code of all.
  std::vector<float> verdict{static_cast<float>(failed)};
  px::comm::allreduce(px::comm::mpi::world(), verdict, px::comm::Reduction::max,
                      {.algorithm = px::comm::Algorithm::ring});
  px::comm::mpi::finalize();
  if (verdict[0] != 0 && rank == 0) fmt::print(stderr, "some rank failed\n");
  return verdict[0] != 0 ? 1 : 0;
}
