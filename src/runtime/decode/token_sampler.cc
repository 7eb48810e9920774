#include "runtime/decode/token_sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"

namespace px::decode {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature))
    fail("temperature {} must be a finite number >= 0 (0: greedy)", p.temperature);
  if (p.top_k < 0) fail("top-k {} must be >= 0 (0: every token)", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) fail("top-p {} must be in (0, 1]", p.top_p);
}

TokenSampler::TokenSampler(SamplingParams params, uint64_t seed) : params_(params), rng_(seed) { validate(params_); }

int32_t TokenSampler::next(const float* logits, int64_t vocab) {
  if (params_.temperature == 0) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  ranked_.clear();
  for (int64_t v = 0; v < vocab; ++v)
    ranked_.emplace_back(logits[v] / static_cast<float>(params_.temperature), static_cast<int>(v));
  const int64_t k = params_.top_k == 0 ? vocab : std::min<int64_t>(params_.top_k, vocab);
  std::partial_sort(ranked_.begin(), ranked_.begin() + k, ranked_.end(), std::greater<>());
  weights_.assign(static_cast<size_t>(k), 0);
  double total = 0;
  for (int64_t j = 0; j < k; ++j)
    total += weights_[static_cast<size_t>(j)] = std::exp(double(ranked_[static_cast<size_t>(j)].first - ranked_[0].first));
  int64_t kept = k;
  if (params_.top_p < 1) {  // the smallest head of the ranking whose probability reaches top_p
    double mass = 0;
    for (kept = 0; kept < k && mass < params_.top_p * total;) mass += weights_[static_cast<size_t>(kept++)];
    total = mass;
  }
  double u = rng_.uniform() * total;
  int64_t pick = 0;
  while (pick + 1 < kept && (u -= weights_[static_cast<size_t>(pick)]) > 0) ++pick;
  return ranked_[static_cast<size_t>(pick)].second;
}

namespace {

// log(sum(exp(logits))), shifted by the maximum.
double log_sum_exp(const float* logits, int64_t vocab) {
  const float m = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(logits[v]) - m);
  return m + std::log(sum);
}

}  // namespace

std::vector<TokenLogprob> TokenSampler::top_logprobs(const float* logits, int64_t vocab, int k) {
  const double lse = log_sum_exp(logits, vocab);
  std::vector<TokenLogprob> all;
  for (int64_t v = 0; v < vocab; ++v) all.push_back({static_cast<int32_t>(v), static_cast<float>(logits[v] - lse)});
  const auto count = static_cast<size_t>(std::clamp<int64_t>(k, 0, vocab));
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(count), all.end(),
                    [](const TokenLogprob& a, const TokenLogprob& b) {
                      return a.logprob != b.logprob ? a.logprob > b.logprob : a.token < b.token;
                    });
  all.resize(count);
  return all;
}

float TokenSampler::logprob_of(const float* logits, int64_t vocab, int32_t token) {
  PX_CHECK(token >= 0 && token < vocab, "token {} of a vocabulary of {}", token, vocab);
  return static_cast<float>(logits[token] - log_sum_exp(logits, vocab));
}

}  // namespace px::decode
