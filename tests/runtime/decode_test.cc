// The decode engine against the full-recompute forward (build_gpt over the
// whole prefix, today's `sample` algorithm, kept here as the reference):
// every row the engine computes, in chunks of any size, alone or batched
// with other sequences, through any block size, gives the logits the full
// forward gives for the same prefix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "comm/backends.h"
#include "runtime/decode/block_pool.h"
#include "runtime/decode/decode_runner.h"
#include "runtime/tasks/sampling.h"
#include "testing/gpt_reference.h"

namespace px::decode {
namespace {

const nn::GptConfig kConfig{.vocab = 256, .block = 48, .n_layer = 2, .n_head = 4, .n_embd = 32};

ParamStore weights(uint64_t seed) { return testing::scaled_gpt_weights(kConfig, seed); }

std::vector<float> full_forward(const ParamStore& params, std::span<const int32_t> prefix) {
  return testing::full_forward(kConfig, params, prefix);
}

std::vector<int32_t> random_tokens(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % kConfig.vocab);
  return t;
}

// The largest |a - b| over a row.
double max_difference(const float* a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t v = 0; v < b.size(); ++v) worst = std::max(worst, std::abs(double(a[v]) - b[v]));
  return worst;
}

// max_difference over the logits' scale (their largest magnitude, at least 1).
double relative_difference(const float* a, const std::vector<float>& b) {
  double scale = 1;
  for (const float v : b) scale = std::max(scale, double(std::abs(v)));
  return max_difference(a, b) / scale;
}

TEST(Decode, EveryRowOfEveryChunkMatchesTheFullForward) {
  const ParamStore params = weights(3);
  const std::vector<int32_t> sequence = random_tokens(41, 5);
  for (int64_t block_tokens : {16, 3}) {
    const int64_t entries = nn::block_table_entries(kConfig, block_tokens);
    DecodeRunner runner(kConfig, params, {.blocks = entries + 4, .block_tokens = block_tokens});
    // Blocks out of order: attention must read through the table.
    std::vector<int32_t> table(static_cast<size_t>(entries + 4));
    std::iota(table.rbegin(), table.rend(), 0);
    int64_t start = 0;
    std::vector<int64_t> chunks = {17, 9};
    chunks.resize(chunks.size() + 15, 1);
    double worst = 0;
    for (int64_t rows : chunks) {
      const SequenceChunk chunk{.tokens = sequence, .start = start, .rows = rows, .blocks = table};
      const Tensor logits = runner.run(make_batch({&chunk, 1}, entries, block_tokens));
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<float> expected =
            full_forward(params, std::span<const int32_t>(sequence).first(static_cast<size_t>(start + r + 1)));
        worst = std::max(worst, max_difference(logits.f32() + r * kConfig.vocab, expected));
      }
      start += rows;
    }
    EXPECT_LT(worst, 1e-4) << "block tokens " << block_tokens;
    EXPECT_EQ(runner.lowered(), (std::set<int64_t>{1, 16, 24}));  // row buckets: 9 and 17 padded
  }
}

TEST(Decode, SequencesBatchedTogetherEachMatchTheirOwnForward) {
  const ParamStore params = weights(4);
  const int64_t block_tokens = 4, entries = nn::block_table_entries(kConfig, block_tokens);
  BlockPool pool(3 * entries, block_tokens);
  DecodeRunner together(kConfig, params, {.blocks = pool.blocks(), .block_tokens = block_tokens});
  DecodeRunner alone(kConfig, params, {.blocks = pool.blocks(), .block_tokens = block_tokens});
  std::vector<std::vector<int32_t>> sequences = {random_tokens(30, 1), random_tokens(12, 2), random_tokens(25, 3)};
  std::vector<std::vector<int32_t>> tables(3);
  std::vector<int64_t> done(3, 0);
  // Iterations mixing prefills and decodes of the three, started at different times.
  const std::vector<std::vector<int64_t>> plan = {{7, 0, 0}, {1, 5, 0}, {1, 7, 10}, {1, 0, 15}, {1, 0, 0}};
  double worst = 0;
  for (const std::vector<int64_t>& rows : plan) {
    std::vector<SequenceChunk> chunks;
    for (size_t s = 0; s < 3; ++s) {
      if (rows[s] == 0) continue;
      ASSERT_TRUE(pool.grow(tables[s], done[s] + rows[s]));
      chunks.push_back({.tokens = sequences[s], .start = done[s], .rows = rows[s], .blocks = tables[s]});
    }
    const DecodeBatch batch = make_batch(chunks, entries, block_tokens);
    const Tensor logits = together.run(batch);
    int64_t row = 0;
    for (const SequenceChunk& c : chunks) {
      // Alone, the same chunk gives the same logits but for the last bits:
      // attention reads only the row's own sequence (bit for bit, tested in
      // tests/kernels), but the GEMMs over all N rows take OpenBLAS paths
      // that depend on N: apart by a little of the logits' scale (their
      // largest magnitude), 1e-6 on SkylakeX's kernels, up to 1.1e-5 on Zen's
      // (AMD EPYC, 2026-11-30), where logits cancel over long sums.
      const Tensor own = alone.run(make_batch({&c, 1}, entries, block_tokens));
      for (int64_t r = 0; r < c.rows; ++r, ++row) {
        const float* got = logits.f32() + row * kConfig.vocab;
        const std::vector<float> mine(own.f32() + r * kConfig.vocab, own.f32() + (r + 1) * kConfig.vocab);
        EXPECT_LT(relative_difference(got, mine), 5e-5) << "row " << row;
        worst = std::max(worst, relative_difference(got, full_forward(params, c.tokens.first(static_cast<size_t>(c.start + r + 1)))));
      }
    }
    for (size_t s = 0; s < 3; ++s) done[s] += rows[s];
  }
  EXPECT_LT(worst, 5e-5);
}

TEST(Decode, GreedySampleIsTheFullRecomputeContinuationPastTheContext) {
  const ParamStore params = weights(6);
  const std::string prompt = "the decode engine ";
  const int64_t tokens = 40;  // 18 + 40 > the context of 48: the window slides
  const std::string expected = testing::greedy_continuation(kConfig, params, prompt, tokens);
  const std::string got = sample_text(kConfig, params, prompt, {.tokens = tokens, .sampling = {.temperature = 0}});
  EXPECT_EQ(got, expected);
}

// Tensor parallelism: the iterations of a few sequences (prefills and
// decodes mixed) over 2 and 4 ranks in process give the one-rank logits,
// each rank computing and caching its heads only.
TEST(DecodeTensorParallel, EveryRankCountGivesTheOneRankLogits) {
  const ParamStore params = weights(7);
  const int64_t block_tokens = 4, entries = nn::block_table_entries(kConfig, block_tokens);
  BlockPool pool(3 * entries, block_tokens);
  std::vector<std::vector<int32_t>> sequences = {random_tokens(30, 11), random_tokens(9, 12), random_tokens(20, 13)};
  std::vector<std::vector<int32_t>> tables(3);
  std::vector<int64_t> done(3, 0);
  std::vector<DecodeBatch> batches;
  for (const std::vector<int64_t>& rows : std::vector<std::vector<int64_t>>{{7, 0, 0}, {1, 5, 0}, {1, 1, 13}, {1, 1, 1}}) {
    std::vector<SequenceChunk> chunks;
    for (size_t s = 0; s < 3; ++s) {
      if (rows[s] == 0) continue;
      ASSERT_TRUE(pool.grow(tables[s], done[s] + rows[s]));
      chunks.push_back({.tokens = sequences[s], .start = done[s], .rows = rows[s], .blocks = tables[s]});
      done[s] += rows[s];
    }
    batches.push_back(make_batch(chunks, entries, block_tokens));
  }
  const KvCacheShape cache{.blocks = pool.blocks(), .block_tokens = block_tokens};
  std::vector<Tensor> expected;
  DecodeRunner one(kConfig, params, cache);
  for (const DecodeBatch& batch : batches) expected.push_back(one.run(batch));
  for (int tp : {2, 4}) {
    comm::run_inproc(tp, [&](comm::Communicator& ranks) {
      DecodeGroup group(ranks);
      DecodeRunner runner(kConfig, params, cache, Precision::fp32, &group);
      if (!group.lead()) return runner.follow();
      double worst = 0, largest = 0;
      for (size_t b = 0; b < batches.size(); ++b) {
        const Tensor logits = runner.run(batches[b]);
        ASSERT_EQ(logits.shape(), expected[b].shape());
        for (int64_t i = 0; i < logits.numel(); ++i) {
          worst = std::max(worst, std::abs(double(logits.f32()[i]) - expected[b].f32()[i]));
          largest = std::max(largest, std::abs(double(expected[b].f32()[i])));
        }
        if (b == 1) runner.idle();  // an idle tick between iterations changes nothing
      }
      // fp32 sums in another order (row-parallel partial sums): a few ulp of the largest logit.
      EXPECT_LT(worst, 1e-5 * largest) << "tp " << tp << ", largest logit " << largest;
      EXPECT_EQ(runner.local_heads(), kConfig.n_head / tp);
      runner.stop_followers();
    });
  }
}

TEST(Decode, RowBucketsPadToOneTwoFourThenEights) {
  std::vector<int64_t> got;
  for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 16, 17, 250, 256}) got.push_back(padded_rows(n));
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 4, 4, 8, 8, 16, 16, 24, 256, 256}));
  const ParamStore params = weights(9);
  DecodeRunner runner(kConfig, params, {.blocks = 8, .block_tokens = 4});
  runner.prepare(20);
  EXPECT_EQ(runner.lowered(), (std::set<int64_t>{1, 2, 4, 8, 16, 24}));
}

TEST(DecodeTensorParallel, ADegreeThatDoesNotDivideTheHeadsIsRefusedByName) {
  const ParamStore params = weights(8);
  comm::run_inproc(3, [&](comm::Communicator& ranks) {
    DecodeGroup group(ranks);
    try {
      DecodeRunner runner(kConfig, params, {.blocks = 8, .block_tokens = 4}, Precision::fp32, &group);
      ADD_FAILURE() << "tp 3 over 4 heads was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--tp 3 does not divide n_head=4"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace px::decode
