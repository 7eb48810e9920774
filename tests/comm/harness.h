// A generic check for every collective: each rank builds its input from a
// formula of (rank, index), runs the collective, and compares its output with
// the result computed directly from the formula (no communication). Used by
// the in-process suite and the MPI suite alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/collectives.h"

namespace px::comm::testing {

struct Case {
  Collective collective = Collective::allreduce;
  Algorithm algorithm = Algorithm::ring;
  Reduction op = Reduction::sum;
  int64_t count = 0;  // n: elements of the whole buffer (all_to_all: per block)
  DType dtype = DType::f32;
  int ranks_per_node = 0;  // hierarchical
  int servers = 0;         // sharded parameter server
};

std::string describe(const Case& c, int ranks);
// Runs the case on this rank; returns "" when the output is right, else the
// first wrong element and what was expected.
std::string run_case(Communicator& comm, const Case& c);

// Element counts the sweeps use: 0, 1, small primes, counts not divisible by
// typical rank counts, and one spanning several pipeline segments.
std::vector<int64_t> sweep_counts();

}  // namespace px::comm::testing
