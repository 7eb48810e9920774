// The reference the decode engine is held to: the full-recompute forward
// (build_gpt over the whole prefix, the algorithm `sample` ran before it
// had a KV cache), one prefix at a time, and the greedy continuation it
// gives, sliding its window past the model's context.
#pragma once

#include <algorithm>
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
