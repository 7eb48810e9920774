#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"
#include "runtime/decode/token_sampler.h"

namespace px::decode {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 3.0f, 0.0f, 2.0f, -1.0f};

// How often each token comes out of `draws` draws.
std::map<int32_t, double> frequencies(const SamplingParams& params, int draws) {
  TokenSampler sampler(params, 11);
  std::map<int32_t, double> count;
  for (int i = 0; i < draws; ++i) count[sampler.next(kLogits.data(), 6)] += 1.0 / draws;
  return count;
}

double softmax(int token, double temperature, const std::vector<int>& among) {
  double total = 0;
  for (int t : among) total += std::exp(kLogits[static_cast<size_t>(t)] / temperature);
  return std::exp(kLogits[static_cast<size_t>(token)] / temperature) / total;
}

TEST(TokenSampler, TemperatureZeroIsTheLikeliestTokenTheLowestAmongTies) {
  TokenSampler sampler({.temperature = 0}, 1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sampler.next(kLogits.data(), 6), 1);
}

TEST(TokenSampler, DrawsFollowTheSoftmaxOfTheScaledLogits) {
  const auto f = frequencies({.temperature = 0.7}, 40000);
  for (int t = 0; t < 6; ++t)
    EXPECT_NEAR(f.count(t) ? f.at(t) : 0.0, softmax(t, 0.7, {0, 1, 2, 3, 4, 5}), 0.01) << t;
}

TEST(TokenSampler, TopKAndTopPCutTheTail) {
  const auto k = frequencies({.temperature = 1, .top_k = 3}, 20000);  // tokens 1, 2 and 4
  EXPECT_EQ(k.size(), 3u);
  EXPECT_NEAR(k.at(4), softmax(4, 1, {1, 2, 4}), 0.015);
  // Tokens 1 and 2 hold 0.78 of the mass: top_p 0.7 keeps those two only.
  const auto p = frequencies({.temperature = 1, .top_p = 0.7}, 20000);
  EXPECT_EQ(p.size(), 2u);
  EXPECT_NEAR(p.at(1), 0.5, 0.02);
}

TEST(TokenSampler, TheSameSeedDrawsTheSameTokens) {
  TokenSampler a({.temperature = 1.3}, 42), b({.temperature = 1.3}, 42);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next(kLogits.data(), 6), b.next(kLogits.data(), 6));
}

TEST(TokenSampler, LogprobsAreTheLogSoftmax) {
  const std::vector<TokenLogprob> top = TokenSampler::top_logprobs(kLogits.data(), 6, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);
  EXPECT_EQ(top[1].token, 2);
  EXPECT_EQ(top[2].token, 4);
  EXPECT_NEAR(top[0].logprob, std::log(softmax(1, 1, {0, 1, 2, 3, 4, 5})), 1e-6);
  EXPECT_NEAR(TokenSampler::logprob_of(kLogits.data(), 6, 5), std::log(softmax(5, 1, {0, 1, 2, 3, 4, 5})), 1e-6);
}

TEST(TokenSampler, BadParametersAreNamed) {
  EXPECT_THROW(TokenSampler({.temperature = -1}, 1), Error);
  EXPECT_THROW(TokenSampler({.top_k = -2}, 1), Error);
  try {
    TokenSampler({.top_p = 0}, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top-p 0 must be in (0, 1]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace px::decode
