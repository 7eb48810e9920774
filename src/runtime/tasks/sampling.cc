#include "runtime/tasks/sampling.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "runtime/decode/decode_runner.h"

namespace px {

void validate(const SampleOptions& o) {
  if (o.tokens < 0) fail("sample length {} must be >= 0", o.tokens);
  decode::validate(o.sampling);
}

std::string sample_text(const nn::GptConfig& config, const ParamStore& params, const std::string& prompt,
                        const SampleOptions& o) {
  validate(o);
  std::vector<int32_t> context;
  for (unsigned char ch : prompt) context.push_back(ch);
  if (context.empty()) context.push_back('\n');
  // One sequence on the decode engine: its KV cache holds the model's
  // whole context, in blocks of 16 tokens, so each new token computes one
  // row. Past the context the window slides: its positions all change, so
  // the whole window is computed again each step (as it always was).
  constexpr int64_t kBlockTokens = 16;
  const int64_t entries = nn::block_table_entries(config, kBlockTokens);
  decode::DecodeRunner runner(config, params, {.blocks = entries, .block_tokens = kBlockTokens}, o.precision);
  std::vector<int32_t> table(static_cast<size_t>(entries));
  for (int64_t b = 0; b < entries; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  decode::TokenSampler sampler(o.sampling, o.seed);
  std::string out;
  int64_t cached = 0;  // positions of `context` whose k and v the cache holds
  for (int64_t i = 0; i < o.tokens; ++i) {
    const auto length = static_cast<int64_t>(context.size());
    const int64_t window = std::min(length, config.block);
    if (length > config.block) cached = 0;  // the window slid
    const std::span<const int32_t> tokens(context.data() + (length - window), static_cast<size_t>(window));
    const decode::SequenceChunk chunk{.tokens = tokens, .start = cached, .rows = window - cached, .blocks = table};
    const decode::DecodeBatch batch = decode::make_batch({&chunk, 1}, entries, kBlockTokens);
    const Tensor logits = runner.run(batch);  // (rows, V): the last row predicts the next token
    cached = window;
    const int token = sampler.next(logits.f32() + (batch.rows() - 1) * config.vocab, config.vocab);
    context.push_back(token);
    out.push_back(static_cast<char>(token));
  }
  return out;
}

}  // namespace px
