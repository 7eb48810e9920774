#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace px {

TEST(ThreadPool, CoversEveryIndexExactlyOnceForManyThreadCounts) {
  for (int threads : {1, 2, 3, 5}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
  set_num_threads(1);
}

TEST(ThreadPool, PropagatesExceptionsFromWorkers) {
  set_num_threads(2);
  EXPECT_THROW(parallel_for(0, 100, 1,
                            [](int64_t lo, int64_t) {
                              if (lo > 0) throw Error("boom");
                            }),
               Error);
  set_num_threads(1);
}

TEST(ThreadPool, RejectsZeroThreads) { EXPECT_THROW(set_num_threads(0), Error); }

}  // namespace px
