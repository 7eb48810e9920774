// nn::parameter_count and active_parameter_count, counted in closed form
// (the memory guard and the planner call them before any graph exists),
// against the graph build_gpt makes; and a config too large to count is a
// named error, not a loop over 10^15 blocks (a fuzzer's find).
#include <gtest/gtest.h>

#include "core/error.h"
#include "nn/gpt.h"

namespace px {
namespace {

nn::GptConfig small(int64_t layers) { return {.vocab = 61, .block = 16, .n_layer = layers, .n_head = 2, .n_embd = 24}; }

TEST(ParameterCount, MatchesTheGraphDenseAndWithMixturesEveryFewBlocks) {
  for (int64_t layers : {1, 2, 5}) {
    nn::GptConfig dense = small(layers);
    EXPECT_EQ(nn::parameter_count(dense), nn::build_gpt(dense, 2, 8, true).graph.param_count()) << layers;
    EXPECT_EQ(nn::active_parameter_count(dense), nn::parameter_count(dense));
    for (int64_t every : {1, 2, 3}) {
      if (every > layers) continue;
      for (const char* balance : {"aux", "bias"}) {
        nn::GptConfig moe = small(layers);
        moe.moe_experts = 4, moe.moe_top_k = 2, moe.moe_every = every, moe.moe_balance = balance;
        const int64_t graph = nn::build_gpt(moe, 2, 8, true).graph.param_count();
        EXPECT_EQ(nn::parameter_count(moe), graph) << layers << " blocks, every " << every << ", " << balance;
        // Two of four experts' weights pass a token, in each of the mixtures.
        const int64_t F = nn::expert_width(moe), C = moe.n_embd, expert = C * F + F + F * C + C;
        EXPECT_EQ(nn::active_parameter_count(moe), graph - 2 * expert * (layers / every));
      }
    }
  }
}

TEST(ParameterCount, AModelTooLargeToCountIsNamedAtOnce) {
  nn::GptConfig huge = small(1000429496729700);  // the fuzzer's input: --layers 1000429496729700
  try {
    nn::validate(huge);
    FAIL() << "validate accepted " << huge.n_layer << " blocks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1000429496729700 blocks"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected at most 2^53"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nn::parameter_count(huge), Error);
  // Large but countable: counted, without building anything.
  EXPECT_GT(nn::parameter_count(small(1'000'000'000)), 1'000'000'000'000);
}

}  // namespace
}  // namespace px
