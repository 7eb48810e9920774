#include "runtime/tasks/sampling.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/rng.h"
#include "parallel/lower.h"
#include "runtime/executor/program_executor.h"
#include "runtime/tasks/task.h"

namespace px {

void validate(const SampleOptions& o) {
  if (o.tokens < 0) fail("sample length {} must be >= 0", o.tokens);
  if (!(o.temperature > 0)) fail("temperature {} must be positive", o.temperature);
  if (o.top_k < 0) fail("top-k {} must be >= 0", o.top_k);
}

std::string sample_text(const nn::GptConfig& config, const ParamStore& params, const std::string& prompt,
                        const SampleOptions& o) {
  validate(o);
  std::vector<int32_t> context;
  for (unsigned char ch : prompt) context.push_back(ch);
  if (context.empty()) context.push_back('\n');
  // A one-rank forward program for the context's length, returning the
  // logits. Only the current one is kept: the context grows a token at a
  // time until it fills the block, so an earlier length never comes back,
  // and every executor holds a flat parameter buffer of the model's size
  // (a 12 x 768 GPT's 200 samples kept 24 GB alive).
  struct Sampler {
    int64_t length = 0;
    nn::Model model;
    std::unique_ptr<ProgramExecutor> executor;
  };
  Sampler sampler;
  Rng rng(o.seed);
  std::string out;
  std::vector<std::pair<float, int>> ranked;
  for (int64_t i = 0; i < o.tokens; ++i) {
    int64_t T = std::min<int64_t>(static_cast<int64_t>(context.size()), config.block);
    if (sampler.length != T) {
      sampler.executor.reset();
      sampler.length = T;
      sampler.model = nn::build_gpt(config, 1, T, false);
      sampler.executor = std::make_unique<ProgramExecutor>(
          parallel::lower_single(sampler.model.graph, sampler.model.loss, {sampler.model.logits},
                                 batch_input_names(sampler.model), false, o.precision),
          AxisGroups{});
      sampler.executor->use_parameters(params);
    }
    Tensor tokens = Tensor::empty({1, T}, DType::i32);
    std::copy(context.end() - T, context.end(), tokens.data<int32_t>());
    Tensor targets = Tensor::zeros({1, T}, DType::i32);
    StepResult step = sampler.executor->run({.feeds = feeds_of(sampler.model, {tokens, targets})});
    const float* logits = step.outputs.front().front().f32() + (T - 1) * config.vocab;  // (1, T, V): last position

    ranked.clear();
    for (int v = 0; v < config.vocab; ++v) ranked.emplace_back(logits[v] / static_cast<float>(o.temperature), v);
    int64_t k = o.top_k == 0 ? config.vocab : std::min<int64_t>(o.top_k, config.vocab);
    std::partial_sort(ranked.begin(), ranked.begin() + k, ranked.end(), std::greater<>());
    double total = 0;
    std::vector<double> weights(k);
    for (int64_t j = 0; j < k; ++j) total += weights[j] = std::exp(double(ranked[j].first - ranked[0].first));
    double u = rng.uniform() * total;
    int64_t pick = 0;
    while (pick + 1 < k && (u -= weights[pick]) > 0) ++pick;
    int token = ranked[pick].second;
    context.push_back(token);
    out.push_back(static_cast<char>(token));
  }
  return out;
}

}  // namespace px
