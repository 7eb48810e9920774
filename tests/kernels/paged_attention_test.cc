// The paged attention kernel against its reference, against the training
// attention kernel, and in the two properties serving relies on: a
// sequence computed in chunks (prefill then decode, its earlier keys read
// from scattered cache blocks) gives what one pass gives, and a row's
// result does not depend on the other sequences in the batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/paged_attention.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

// A pool of `blocks` blocks and a sequence's cache written into it.
struct CachePool {
  int64_t H, D, BS, blocks;
  std::vector<float> data;
  CachePool(int64_t h, int64_t d, int64_t bs, int64_t n) : H(h), D(d), BS(bs), blocks(n), data(n * 2 * h * bs * d, NAN) {}
  // Writes the k and v of `rows` rows of qkv (N, 3, H, D) as positions [start, start + rows).
  void write(const float* qkv, int64_t rows, int64_t start, const std::vector<int32_t>& table) {
    const int64_t C = H * D;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t p = start + i;
      for (int which = 0; which < 2; ++which)
        for (int64_t h = 0; h < H; ++h)
          std::memcpy(data.data() + ((table[static_cast<size_t>(p / BS)] * 2 + which) * H + h) * BS * D + (p % BS) * D,
                      qkv + i * 3 * C + (1 + which) * C + h * D, static_cast<size_t>(D) * sizeof(float));
    }
  }
};

// `n` distinct block ids of `pool` blocks, shuffled.
std::vector<int32_t> table_of(int64_t n, int64_t pool, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(pool));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  ids.resize(static_cast<size_t>(n));
  return ids;
}

struct HeadShape {
  int64_t H, D, BS;
};

TEST(PagedAttention, FastMatchesReferenceOnOddShapes) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (HeadShape s : {HeadShape{1, 1, 1}, HeadShape{3, 5, 3}, HeadShape{2, 8, 16}, HeadShape{4, 13, 7}}) {
      // Three sequences: a decode row after 9 cached tokens, a 4-row chunk
      // after 5, a 70-row prefill from nothing (two row blocks).
      const std::vector<int64_t> rows = {1, 4, 70}, starts = {9, 5, 0};
      const int64_t N = 75, C = s.H * s.D, pool_blocks = 128;
      CachePool pool(s.H, s.D, s.BS, pool_blocks);
      const std::vector<float> qkv = random_vector(N * 3 * C, 7, -2.0f, 2.0f);
      std::vector<std::vector<int32_t>> tables;
      std::vector<AttentionSegment> segments;
      std::vector<int32_t> all = table_of(pool_blocks, pool_blocks, 3);
      int64_t row = 0, next_block = 0;
      for (size_t q = 0; q < rows.size(); ++q) {
        const int64_t need = (starts[q] + rows[q] + s.BS - 1) / s.BS;
        tables.emplace_back(all.begin() + next_block, all.begin() + next_block + need);
        next_block += need;
        const std::vector<float> earlier = random_vector(std::max<int64_t>(starts[q], 1) * 3 * C, 11 + q);
        pool.write(earlier.data(), starts[q], 0, tables.back());
        segments.push_back({.first_row = row, .rows = rows[q], .start = starts[q], .blocks = tables.back().data()});
        row += rows[q];
      }
      ASSERT_LE(next_block, pool_blocks);
      std::vector<float> out(N * C, NAN), out_ref(N * C, NAN);
      paged_attention(s.H, s.D, s.BS, qkv.data(), pool.data.data(), segments, out.data());
      ref::paged_attention(s.H, s.D, s.BS, qkv.data(), pool.data.data(), segments, out_ref.data());
      EXPECT_TRUE(all_close(out, out_ref, 1e-4f, 1e-5f))
          << "H=" << s.H << " D=" << s.D << " BS=" << s.BS << " threads=" << threads;
    }
  }
}

// 67 tokens: one tile; 300: three query tiles and two key tiles.
TEST(PagedAttention, OneSequenceFromAnEmptyCacheIsTheTrainingKernel) {
  for (const int64_t T : {67, 300}) {
    const int64_t H = 3, D = 16, C = H * D;
    const std::vector<float> qkv = random_vector(T * 3 * C, 5, -2.0f, 2.0f);
    std::vector<float> out(T * C), expected(T * C), lse(H * T);
    const std::vector<float> no_cache(1, NAN);
    const AttentionSegment whole{.first_row = 0, .rows = T, .start = 0, .blocks = nullptr};
    paged_attention(H, D, 16, qkv.data(), no_cache.data(), {&whole, 1}, out.data());
    attention({.B = 1, .T = T, .H = H, .D = D}, qkv.data(), expected.data(), lse.data());
    EXPECT_TRUE(all_close(out, expected, 1e-6f, 1e-7f)) << "T=" << T;
  }
}

TEST(PagedAttention, ChunksReadingTheCacheGiveWhatOnePassGives) {
  // A 41-token sequence in one pass, then as a prefill of 17, a chunk of 9
  // and 15 single-token decodes, each reading what came before from
  // scattered blocks of 4 tokens.
  const int64_t T = 41, H = 2, D = 8, C = H * D, BS = 4;
  const std::vector<float> qkv = random_vector(T * 3 * C, 9, -2.0f, 2.0f);
  std::vector<float> whole(T * C);
  const AttentionSegment one{.first_row = 0, .rows = T};
  const std::vector<float> no_cache(1, NAN);
  paged_attention(H, D, BS, qkv.data(), no_cache.data(), {&one, 1}, whole.data());

  CachePool pool(H, D, BS, 16);
  const std::vector<int32_t> table = table_of(11, 16, 1);
  std::vector<int64_t> chunks = {17, 9};
  chunks.resize(chunks.size() + 15, 1);
  std::vector<float> chunked(T * C, NAN);
  int64_t start = 0;
  for (int64_t rows : chunks) {
    const AttentionSegment seg{.first_row = 0, .rows = rows, .start = start, .blocks = table.data()};
    paged_attention(H, D, BS, qkv.data() + start * 3 * C, pool.data.data(), {&seg, 1}, chunked.data() + start * C);
    pool.write(qkv.data() + start * 3 * C, rows, start, table);
    start += rows;
  }
  ASSERT_EQ(start, T);
  EXPECT_TRUE(all_close(chunked, whole, 1e-5f, 1e-6f));
}

TEST(PagedAttention, ARowsResultDoesNotDependOnTheBatch) {
  const int64_t H = 3, D = 8, C = H * D, BS = 4;
  CachePool pool(H, D, BS, 12);
  const std::vector<int32_t> a = table_of(6, 12, 2);
  const std::vector<int32_t> b(a.rbegin(), a.rend());
  const std::vector<float> cached = random_vector(20 * 3 * C, 4);
  pool.write(cached.data(), 10, 0, {a.begin(), a.begin() + 3});
  pool.write(cached.data() + 10 * 3 * C, 10, 0, {b.begin(), b.begin() + 3});
  const std::vector<float> qkv = random_vector(5 * 3 * C, 6);  // sequence a's 2 rows, then b's 3
  const AttentionSegment seg_a{.first_row = 0, .rows = 2, .start = 10, .blocks = a.data()};
  const AttentionSegment seg_b{.first_row = 2, .rows = 3, .start = 10, .blocks = b.data()};
  std::vector<float> together(5 * C), alone(5 * C);
  const std::vector<AttentionSegment> both = {seg_a, seg_b};
  paged_attention(H, D, BS, qkv.data(), pool.data.data(), both, together.data());
  paged_attention(H, D, BS, qkv.data(), pool.data.data(), {&seg_a, 1}, alone.data());
  paged_attention(H, D, BS, qkv.data(), pool.data.data(), {&seg_b, 1}, alone.data());
  EXPECT_EQ(together, alone);  // bit for bit
}

}  // namespace
}  // namespace px::kernels
