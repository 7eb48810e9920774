// Blocked attention against whole-sequence causal attention: a sequence cut
// into P blocks (uneven ones too), every query block run against every key
// block (shift 0..P-1, as the ring brings them) and the parts merged by
// their log-sum-exps gives the reference kernel's output; the blocks'
// gradients, merged back the same way, give its dqkv.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/block.h"
#include "kernels/attention.h"
#include "kernels/block_attention.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

struct Case {
  int64_t B, T, H, D, P;
  bool balanced = false;  // zigzag blocks (core/block.h)
};

// Block p's runs of tokens, in the order it holds them.
std::vector<Block> runs_of(const Case& c, int64_t p) {
  if (!c.balanced) return {block(c.T, static_cast<int>(c.P), static_cast<int>(p))};
  const ZigzagBlock z = zigzag_block(c.T, static_cast<int>(c.P), static_cast<int>(p));
  return {z.early, z.late};
}

int64_t padded(const Case& c) {
  int64_t L = 0;
  for (int64_t p = 0; p < c.P; ++p) {
    int64_t n = 0;
    for (const Block& r : runs_of(c, p)) n += r.count;
    L = std::max(L, n);
  }
  return L;
}

// Token t of slot s (0 q, 1 k, 2 v) in the sequence layout (B, T, 3, H, D).
int64_t at(const Case& c, int64_t b, int64_t t, int64_t s) { return ((b * c.T + t) * 3 + s) * c.H * c.D; }

class BlockAttention : public ::testing::TestWithParam<Case> {};

TEST_P(BlockAttention, MergedBlocksEqualWholeSequenceAttentionAndItsGradient) {
  const Case c = GetParam();
  const int64_t C = c.H * c.D, L = padded(c), rows = c.B * c.P * L;
  const std::vector<float> qkv = random_vector(c.B * c.T * 3 * C, 11), dout = random_vector(c.B * c.T * C, 12);
  // The reference: whole-sequence attention and its gradient.
  std::vector<float> out(static_cast<size_t>(c.B * c.T * C)), whole_lse(static_cast<size_t>(c.B * c.H * c.T));
  std::vector<float> dqkv(qkv.size());
  const AttentionDims whole{.B = c.B, .T = c.T, .H = c.H, .D = c.D};
  ref::attention(whole, qkv.data(), out.data(), whole_lse.data());
  ref::attention_backward(whole, qkv.data(), dout.data(), dqkv.data());

  // Blocked copies; the key/value blocks as the ring holds them at step j.
  std::vector<float> qkv_b(static_cast<size_t>(rows * 3 * C), 0.0f), dout_b(static_cast<size_t>(rows * C), 0.0f);
  auto each_token = [&](auto body) {
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t p = 0; p < c.P; ++p) {
        int64_t i = 0;
        for (const Block& tok : runs_of(c, p))
          for (int64_t t = 0; t < tok.count; ++t) body(b, p, i++, tok.begin + t);
      }
  };
  each_token([&](int64_t b, int64_t p, int64_t i, int64_t t) {
    const int64_t row = (b * c.P + p) * L + i;
    std::copy_n(qkv.begin() + at(c, b, t, 0), 3 * C, qkv_b.begin() + row * 3 * C);
    std::copy_n(dout.begin() + (b * c.T + t) * C, C, dout_b.begin() + row * C);
  });
  auto kv_at_step = [&](int64_t j) {  // block p holds key block (p - j) mod P
    std::vector<float> kv(static_cast<size_t>(rows * 2 * C));
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t p = 0; p < c.P; ++p)
        for (int64_t i = 0; i < L; ++i)
          std::copy_n(qkv_b.begin() + ((b * c.P + (p - j + c.P) % c.P) * L + i) * 3 * C + C, 2 * C,
                      kv.begin() + ((b * c.P + p) * L + i) * 2 * C);
    return kv;
  };
  std::vector<std::vector<float>> kv(static_cast<size_t>(c.P)), o(kv.size()), lse(kv.size());
  std::vector<const float*> o_ptr, lse_ptr;
  for (int64_t j = 0; j < c.P; ++j) {
    const BlockGrid grid{.B = c.B, .P = c.P, .L = L, .H = c.H, .D = c.D, .tokens = c.T, .parts = c.P, .first = 0,
                         .shift = j, .balanced = c.balanced};
    kv[j] = kv_at_step(j);
    o[j].resize(static_cast<size_t>(rows * C)), lse[j].resize(static_cast<size_t>(rows * c.H));
    block_attention(grid, qkv_b.data(), kv[j].data(), o[j].data(), lse[j].data());
    o_ptr.push_back(o[j].data()), lse_ptr.push_back(lse[j].data());
  }
  std::vector<float> merged(static_cast<size_t>(rows * C));
  merge_attention(rows, c.H, c.D, o_ptr, lse_ptr, merged.data());
  std::vector<float> blocked_out(out.size());
  each_token([&](int64_t b, int64_t p, int64_t i, int64_t t) {
    std::copy_n(merged.begin() + ((b * c.P + p) * L + i) * C, C, blocked_out.begin() + (b * c.T + t) * C);
  });
  EXPECT_TRUE(all_close(blocked_out, out, 1e-4f, 1e-5f));

  // Backward: merge, then each block; dq adds up, dk/dv go to the key block they came from.
  std::vector<std::vector<float>> d_o(kv.size(), std::vector<float>(static_cast<size_t>(rows * C)));
  std::vector<std::vector<float>> d_lse(kv.size(), std::vector<float>(static_cast<size_t>(rows * c.H)));
  std::vector<float*> d_o_ptr, d_lse_ptr;
  for (size_t j = 0; j < kv.size(); ++j) d_o_ptr.push_back(d_o[j].data()), d_lse_ptr.push_back(d_lse[j].data());
  merge_attention_backward(rows, c.H, c.D, o_ptr, lse_ptr, dout_b.data(), d_o_ptr, d_lse_ptr);
  std::vector<float> dqkv_b(qkv_b.size(), 0.0f), dq(qkv_b.size()), dkv(static_cast<size_t>(rows * 2 * C));
  for (int64_t j = 0; j < c.P; ++j) {
    const BlockGrid grid{.B = c.B, .P = c.P, .L = L, .H = c.H, .D = c.D, .tokens = c.T, .parts = c.P, .first = 0,
                         .shift = j, .balanced = c.balanced};
    block_attention_backward(grid, qkv_b.data(), kv[j].data(), o[j].data(), lse[j].data(), d_o[j].data(), d_lse[j].data(),
                             dq.data(), dkv.data());
    for (size_t e = 0; e < dq.size(); ++e) dqkv_b[e] += dq[e];
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t p = 0; p < c.P; ++p)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t e = 0; e < 2 * C; ++e)
            dqkv_b[static_cast<size_t>(((b * c.P + (p - j + c.P) % c.P) * L + i) * 3 * C + C + e)] +=
                dkv[static_cast<size_t>(((b * c.P + p) * L + i) * 2 * C + e)];
  }
  std::vector<float> blocked_dqkv(dqkv.size());
  each_token([&](int64_t b, int64_t p, int64_t i, int64_t t) {
    std::copy_n(dqkv_b.begin() + ((b * c.P + p) * L + i) * 3 * C, 3 * C, blocked_dqkv.begin() + at(c, b, t, 0));
  });
  EXPECT_TRUE(all_close(blocked_dqkv, dqkv, 1e-3f, 1e-5f));
}

INSTANTIATE_TEST_SUITE_P(Shapes, BlockAttention,
                         ::testing::Values(Case{1, 4, 1, 2, 1}, Case{2, 8, 2, 4, 2}, Case{1, 7, 2, 3, 3},
                                           Case{2, 16, 3, 8, 4}, Case{1, 5, 1, 4, 5}, Case{1, 4, 1, 2, 1, true},
                                           Case{2, 8, 2, 4, 2, true}, Case{1, 11, 2, 3, 3, true},
                                           Case{2, 16, 3, 8, 4, true}, Case{1, 7, 1, 4, 5, true},
                                           // Blocks of several query and key tiles (kernels/attention_tiles.h:
                                           // 128 x 256), a zigzag run boundary inside a query tile.
                                           Case{1, 600, 1, 8, 2}, Case{1, 700, 1, 8, 2, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_H" + std::to_string(c.H) +
                                  "_D" + std::to_string(c.D) + "_P" + std::to_string(c.P) +
                                  (c.balanced ? "_balanced" : "");
                         });

// The work a rank's attention does over the ring's P steps (score entries
// computed, as the kernels skip what the mask hides): zigzag blocks give
// every rank the same within 10% (the bound); contiguous blocks
// give the last rank nearly twice the mean.
double rank_work(int64_t T, int64_t P, bool balanced, int64_t rank) {
  double work = 0;
  for (int64_t shift = 0; shift < P; ++shift) {
    const BlockGrid one{.L = T, .tokens = T, .parts = P, .first = rank, .shift = shift, .balanced = balanced};
    work += block_entries(one);
  }
  return work;
}

TEST(BlockAttentionWork, ZigzagBlocksBalanceTheRanksCausalWork) {
  for (const int64_t P : {2, 3, 4, 8}) {
    const int64_t T = 1024;
    double least = 1e300, most = 0, plain_most = 0, plain_total = 0;
    for (int64_t r = 0; r < P; ++r) {
      least = std::min(least, rank_work(T, P, true, r));
      most = std::max(most, rank_work(T, P, true, r));
      plain_most = std::max(plain_most, rank_work(T, P, false, r));
      plain_total += rank_work(T, P, false, r);
    }
    EXPECT_LE(most / least, 1.10) << "P=" << P;
    EXPECT_GT(plain_most / (plain_total / static_cast<double>(P)), 1.3) << "P=" << P;
  }
}

}  // namespace
}  // namespace px::kernels
