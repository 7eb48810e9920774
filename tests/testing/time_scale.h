// How much slower than release this test binary runs: scripts/test.sh sets
// PX_TEST_TIME_SCALE=5 under the sanitizers (they run the code 5-20x
// slower). A test that gives a search a wall-clock budget, or waits for a
// deadline, multiplies it by this so the sanitizers' run checks the same
// thing the release run does instead of failing on a loaded machine.
#pragma once

#include <algorithm>
#include <cstdlib>

namespace px::testing {

inline double time_scale() {
  const char* scale = std::getenv("PX_TEST_TIME_SCALE");
  return scale ? std::max(1.0, std::atof(scale)) : 1.0;
}

inline bool under_sanitizers() { return time_scale() > 1; }

}  // namespace px::testing
