#include "core/float_env.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <thread>
#include <xmmintrin.h>

namespace px {
namespace {

// Through volatile locals: the product is computed at run time, under the
// MXCSR set here, not folded by the compiler.
float product(float a, float b) {
  volatile float x = a, y = b;
  return x * y;
}

TEST(FloatEnv, SubnormalsFlushToZeroOnThisThreadAndOnThreadsStartedAfter) {
  const unsigned saved = _mm_getcsr();
  EXPECT_GT(product(FLT_MIN, 0.5f), 0.0f) << "the default environment keeps subnormals";
  flush_subnormals_to_zero();
  EXPECT_EQ(product(FLT_MIN, 0.5f), 0.0f);
  float in_thread = -1.0f;
  std::thread([&] { in_thread = product(FLT_MIN, 0.5f); }).join();
  EXPECT_EQ(in_thread, 0.0f) << "a thread started afterwards inherits the environment";
  EXPECT_EQ(product(FLT_MIN, 2.0f), 2.0f * FLT_MIN) << "normal numbers are untouched";
  _mm_setcsr(saved);
}

}  // namespace
}  // namespace px
