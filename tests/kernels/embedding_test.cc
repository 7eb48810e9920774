#include <gtest/gtest.h>

#include "kernels/embedding.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::all_close;
using testing::random_ids;
using testing::random_vector;

TEST(Embedding, FastMatchesReferenceOnPrimeSizes) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (auto [N, V, C] : {std::tuple<int64_t, int32_t, int64_t>{1, 1, 1}, {7, 3, 13},
                           {31, 17, 64}, {2048, 257, 128}, {1031, 7, 384}}) {
      auto ids = random_ids(N, V, 1);
      auto table = random_vector(V * C, 2), dout = random_vector(N * C, 3);
      std::vector<float> out(N * C), out_ref(N * C);
      embedding(N, C, ids.data(), table.data(), 0, V, out.data());
      ref::embedding(N, C, ids.data(), table.data(), 0, V, out_ref.data());
      EXPECT_EQ(out, out_ref);
      auto dtable = random_vector(V * C, 4), dtable_ref = dtable;
      embedding_backward(N, C, ids.data(), dout.data(), 0, V, dtable.data());
      ref::embedding_backward(N, C, ids.data(), dout.data(), 0, V, dtable_ref.data());
      // Same summation order per element, so bitwise equal.
      EXPECT_EQ(dtable, dtable_ref) << "N=" << N << " V=" << V << " C=" << C;
      // A vocabulary shard: rows [V/3, V/3 + V/2) of the table.
      const int64_t first = V / 3, rows = std::max<int64_t>(1, V / 2);
      embedding(N, C, ids.data(), table.data(), first, rows, out.data());
      ref::embedding(N, C, ids.data(), table.data(), first, rows, out_ref.data());
      EXPECT_EQ(out, out_ref);
      embedding_backward(N, C, ids.data(), dout.data(), first, rows, dtable.data());
      ref::embedding_backward(N, C, ids.data(), dout.data(), first, rows, dtable_ref.data());
      EXPECT_EQ(dtable, dtable_ref) << "shard N=" << N << " V=" << V << " C=" << C;
    }
  }
}

TEST(Embedding, BackwardAccumulatesRepeatedIds) {
  const std::vector<int32_t> ids = {2, 0, 2, 2};
  const std::vector<float> dout = {1, 10, 2, 20, 3, 30, 4, 40};  // (4, 2)
  std::vector<float> dtable = {0.5f, 0.5f, 0, 0, 1, 1};           // (3, 2)
  embedding_backward(4, 2, ids.data(), dout.data(), 0, 3, dtable.data());
  EXPECT_EQ(dtable, (std::vector<float>{2.5f, 20.5f, 0, 0, 9, 81}));
}

TEST(Embedding, AShardLooksUpOnlyItsRowsAndZeroesTheRest) {
  const std::vector<int32_t> ids = {0, 3, 2};
  const std::vector<float> table = {20, 21, 30, 31};  // rows 2 and 3 of the vocabulary, C = 2
  std::vector<float> out(6, -1);
  embedding(3, 2, ids.data(), table.data(), 2, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{0, 0, 30, 31, 20, 21}));
}

TEST(Embedding, BackwardIsBitwiseIndependentOfThreadCount) {
  testing::ThreadReset reset;
  const int64_t N = 4099, C = 130;
  auto ids = random_ids(N, 5, 5);
  auto dout = random_vector(N * C, 6);
  std::vector<std::vector<float>> results;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    std::vector<float> dtable(5 * C, 0.0f);
    embedding_backward(N, C, ids.data(), dout.data(), 0, 5, dtable.data());
    results.push_back(dtable);
  }
  EXPECT_EQ(results[0], results[1]);
}

}  // namespace
}  // namespace px::kernels
