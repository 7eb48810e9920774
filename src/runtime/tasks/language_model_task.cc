// Byte-level language modelling with GPT on a text corpus.
#include "data/sampler.h"
#include "data/text_corpus.h"
#include "nn/gpt.h"
#include "parallel/lower.h"
#include "parallel/row_split.h"
#include "runtime/executor/program_executor.h"
#include "runtime/tasks/task.h"

namespace px {
namespace {

class LanguageModelTask : public Task {
 public:
  explicit LanguageModelTask(const TaskOptions& o)
      : options_(o),
        corpus_(o.data.empty() ? load_fortunes_corpus(o.model.gpt.block) : load_text_corpus(o.data, o.model.gpt.block)),
        sampler_(corpus_.train, o.batch, o.model.gpt.block, o.seed),
        // Validation batches are the global batch's size whatever the strategy
        // (ranks, micro-batches, stages): the same windows, the same loss.
        validation_(corpus_.val, o.batch, o.model.gpt.block, o.eval_batches) {}

  nn::Model build(int64_t batch, bool training) const override {
    return nn::build_model(options_.model, batch, training);
  }

  DataBatch next_batch(int rank, int world) override {
    // Every rank draws all B offsets, so all advance alike.
    const std::vector<int64_t> offsets = sampler_.next_offsets();
    const parallel::RowRange mine = parallel::shard_rows(sampler_.batch_size(), rank, world);
    TokenBatch b = sampler_.windows(std::span(offsets).subspan(mine.begin, mine.size()));
    return {b.inputs, b.targets, sampler_.batch_size()};
  }

  EvaluationSums evaluate(const ParamStore& params, int part, int parts) override {
    if (!eval_) {
      eval_model_ = build(validation_.windows_per_batch(), false);
      eval_ = std::make_unique<ProgramExecutor>(
          parallel::lower_single(eval_model_.graph, eval_model_.loss, {}, batch_input_names(eval_model_), false),
          AxisGroups{});
    }
    eval_->use_parameters(params);
    EvaluationSums sums;
    for (int64_t i = part; i < validation_.num_batches(); i += parts) {
      TokenBatch b = validation_.batch(i);
      sums.loss += eval_->run({.feeds = feeds_of(eval_model_, {b.inputs, b.targets})}).loss;
      sums.weight += 1;
    }
    return sums;
  }

  nlohmann::json data_state() const override { return sampler_.state(); }
  void restore_data_state(const nlohmann::json& state) override {
    sampler_.set_state(state.get<WindowSamplerState>());
  }
  const char* unit() const override { return "tok"; }
  int64_t units_per_row() const override { return options_.model.gpt.block; }

 private:
  TaskOptions options_;
  TextCorpus corpus_;
  WindowSampler sampler_;
  ValidationWindows validation_;
  nn::Model eval_model_;
  std::unique_ptr<ProgramExecutor> eval_;  // a one-rank forward program
};

}  // namespace

std::unique_ptr<Task> make_language_model_task(const TaskOptions& options) {
  return std::make_unique<LanguageModelTask>(options);
}

std::unique_ptr<Task> make_classification_task(const TaskOptions& options);

std::unique_ptr<Task> make_task(const TaskOptions& options) {
  if (options.model.kind == "gpt") return make_language_model_task(options);
  if (nn::is_onnx_path(options.model.kind)) {
    // An imported model's task is its main input's dataset: token windows
    // as long as its (B, T) input, or images.
    const nn::Model probe = nn::build_model(options.model, 1, false);
    const TensorSpec& input = probe.graph.spec(probe.inputs);
    if (input.dtype != DType::f32) {
      TaskOptions o = options;
      o.model.gpt.block = input.shape[1];
      return make_language_model_task(o);
    }
  }
  return make_classification_task(options);
}

}  // namespace px
