#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "comm/backends.h"
#include "comm/collectives.h"
#include "harness.h"

namespace px::comm {
namespace {

TEST(Communicator, SplitMakesRowAndColumnGroupsOfAMesh) {
  // 6 ranks as a 2x3 mesh: rows {0,1,2},{3,4,5}; columns {0,3},{1,4},{2,5}.
  std::atomic<int> wrong{0};
  run_inproc(6, [&](Communicator& world) {
    Communicator row = world.split(world.rank() / 3, world.rank());
    Communicator column = world.split(world.rank() % 3, world.rank());
    if (row.size() != 3 || row.rank() != world.rank() % 3) ++wrong;
    if (column.size() != 2 || column.rank() != world.rank() / 3) ++wrong;
    // Interleaved collectives on both groups and the world do not mix.
    std::vector<float> a(1001, 1.0f), b(77, static_cast<float>(world.rank())), c(5, 1.0f);
    allreduce(row, a, Reduction::sum, {.algorithm = Algorithm::ring});
    allreduce(column, b, Reduction::max, {.algorithm = Algorithm::shared_memory});
    allreduce(world, c, Reduction::sum, {.algorithm = Algorithm::halving_doubling});
    if (a[1000] != 3.0f) ++wrong;
    if (b[0] != static_cast<float>(world.rank() % 3 + 3)) ++wrong;
    if (c[4] != 6.0f) ++wrong;
    // A split of a split, reversed by key.
    Communicator reversed = row.split(0, -row.rank());
    if (reversed.rank() != 2 - row.rank() || reversed.world_rank(0) != (world.rank() / 3) * 3 + 2)
      ++wrong;
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Communicator, SplitRejectsNegativeColor) {
  EXPECT_THROW(run_inproc(2, [](Communicator& world) { world.split(-1, 0); }), Error);
}

TEST(Communicator, NameAlgorithmsAndCollectivesRoundTrip) {
  for (Collective c : {Collective::allreduce, Collective::barrier})
    EXPECT_EQ(collective_from_name(collective_name(c)), c);
  EXPECT_EQ(algorithm_from_name("halving_doubling"), Algorithm::halving_doubling);
  EXPECT_EQ(algorithm_from_name("auto"), Algorithm::automatic);
  EXPECT_THROW(algorithm_from_name("rign"), Error);
}

TEST(Communicator, AlgorithmThatDoesNotImplementTheCollectiveIsAnError) {
  try {
    run_inproc(2, [](Communicator& world) {
      std::vector<float> data(4);
      broadcast(world, data, 0, {.algorithm = Algorithm::ring});
    });
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'ring' does not implement"), std::string::npos)
        << error.what();
  }
}

TEST(Communicator, NativeOnInprocExplainsItNeedsMpi) {
  try {
    run_inproc(2, [](Communicator& world) {
      std::vector<float> data(4);
      allreduce(world, data, Reduction::sum, {.algorithm = Algorithm::native});
    });
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("needs the MPI transport"), std::string::npos);
  }
}

}  // namespace
}  // namespace px::comm
