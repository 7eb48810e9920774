// The reference the decode engine is held to: the full-recompute forward
// (build_gpt over the whole prefix, the algorithm `sample` ran before it
// had a KV cache), one prefix at a time, and the greedy continuation it
// gives, sliding its window past the model's context.
#pragma once

#include <algorithm>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "nn/gpt.h"
#include "parallel/lower.h"
#include "runtime/executor/program_executor.h"
#include "runtime/tasks/task.h"

namespace px::testing {

// The logits (V) of the full forward over `prefix`, at its last position.
inline std::vector<float> full_forward(const nn::GptConfig& config, const ParamStore& params,
                                       std::span<const int32_t> prefix) {
  const auto T = static_cast<int64_t>(prefix.size());
  const nn::Model model = nn::build_gpt(config, 1, T, false);
  ProgramExecutor executor(
      parallel::lower_single(model.graph, model.loss, {model.logits}, nn::batch_input_names(model), false),
      AxisGroups{});
  executor.use_parameters(params);
  Tensor tokens = Tensor::empty({1, T}, DType::i32);
  std::copy(prefix.begin(), prefix.end(), tokens.data<int32_t>());
  const StepResult step = executor.run({.feeds = feeds_of(model, {tokens, Tensor::zeros({1, T}, DType::i32)})});
  const float* last = step.outputs.front().front().f32() + (T - 1) * config.vocab;
  return {last, last + config.vocab};
}

// `tokens` bytes after `prompt`, each the full forward's most likely next
// byte (the lowest among ties) over the last `config.block` of the context.
inline std::string greedy_continuation(const nn::GptConfig& config, const ParamStore& params, const std::string& prompt,
                                       int64_t tokens) {
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  for (int32_t& t : context) t = static_cast<unsigned char>(t);
  std::string out;
  for (int64_t i = 0; i < tokens; ++i) {
    const auto n = static_cast<int64_t>(context.size()), window = std::min(n, config.block);
    const std::vector<float> logits =
        full_forward(config, params, std::span<const int32_t>(context).last(static_cast<size_t>(window)));
    const auto token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    context.push_back(token);
    out.push_back(static_cast<char>(token));
  }
  return out;
}

// Where a greedy continuation `got` first leaves the reference's
// (`expected`, from greedy_continuation), and whether the reference had a
// near tie there: its two best logits within `tie` (float noise from
// another summation order, e.g. tensor parallelism's allreduce, may pick
// either, and everything after differs).
struct GreedyDivergence {
  int64_t position = -1;  // -1: equal
  double margin = 0;      // the reference's best minus second-best logit there
  bool near_tie(double tie = 1e-4) const { return position >= 0 && margin <= tie; }
};
inline GreedyDivergence greedy_divergence(const nn::GptConfig& config, const ParamStore& params, const std::string& prompt,
                                          const std::string& got, const std::string& expected) {
  const size_t n = std::min(got.size(), expected.size());
  size_t at = 0;
  while (at < n && got[at] == expected[at]) ++at;
  if (at == n && got.size() == expected.size()) return {};
  std::vector<int32_t> context;
  for (char c : prompt + expected.substr(0, at)) context.push_back(static_cast<unsigned char>(c));
  const auto window = std::min(static_cast<int64_t>(context.size()), config.block);
  std::vector<float> logits =
      full_forward(config, params, std::span<const int32_t>(context).last(static_cast<size_t>(window)));
  std::partial_sort(logits.begin(), logits.begin() + 2, logits.end(), std::greater<>());
  return {.position = static_cast<int64_t>(at), .margin = double(logits[0]) - logits[1]};
}

// Parameters for `config` drawn from `seed`, scaled by `scale`: larger than
// GPT-2's initialization, so that the logits are far from flat and a wrong
// key or position shows.
inline ParamStore scaled_gpt_weights(const nn::GptConfig& config, uint64_t seed, float scale = 8) {
  ParamStore params = ParamStore::initialize(nn::build_gpt(config, 1, 1, false).graph, seed);
  for (const std::string& name : params.names()) {
    Tensor& t = params.at(name);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] *= scale;
  }
  return params;
}

}  // namespace px::testing
