// The next token from a row of logits: greedy at temperature 0, otherwise
// drawn from softmax(logits / temperature) cut to the top_k most likely
// tokens and then to the smallest set whose probability reaches top_p
// (nucleus sampling). One sampler per sequence, seeded: its draws depend on
// its own seed and logits alone, never on the batch it runs in, and a
// sequence recomputed after preemption draws what it would have drawn.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/rng.h"

namespace px::decode {

struct SamplingParams {
  double temperature = 1.0;  // >= 0; 0: the most likely token (the lowest id among ties)
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // (0, 1]
  bool operator==(const SamplingParams&) const = default;
};

// px::Error naming the bad parameter.
void validate(const SamplingParams& params);

// A token with its log-probability under the model (log_softmax of the raw
// logits, as OpenAI's logprobs report).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

class TokenSampler {
 public:
  TokenSampler(SamplingParams params, uint64_t seed);

  int32_t next(const float* logits, int64_t vocab);
  // The `k` most likely tokens of `logits`, most likely first, and the
  // log-probability of `token`.
  static std::vector<TokenLogprob> top_logprobs(const float* logits, int64_t vocab, int k);
  static float logprob_of(const float* logits, int64_t vocab, int32_t token);

 private:
  SamplingParams params_;
  Rng rng_;
  std::vector<std::pair<float, int>> ranked_;  // scratch: (scaled logit, token)
  std::vector<double> weights_;
};

}  // namespace px::decode
