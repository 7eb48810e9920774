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
  LanguageModelTask(const nn::ModelConfig& model, const DataOptions& data, uint64_t seed, Precision precision)
      : model_(model),
        precision_(precision),
        corpus_(data.path.empty() ? load_fortunes_corpus(model.gpt.block) : load_text_corpus(data.path, model.gpt.block)),
        sampler_(corpus_.train, data.batch, model.gpt.block, seed),
        // Validation batches are the global batch's size whatever the strategy
        // (ranks, micro-batches, stages): the same windows, the same loss.
        validation_(corpus_.val, data.batch, model.gpt.block, data.eval_batches) {}

  nn::Model build(int64_t batch, bool training) const override { return nn::build_model(model_, batch, training); }

  DataBatch next_batch(const parallel::RowSplit& split, int rank) override {
    // Every rank draws all B offsets, so all advance alike.
    const std::vector<int64_t> offsets = sampler_.next_offsets();
    const parallel::RowRange mine = split.rows_of(sampler_.batch_size(), rank);
    TokenBatch b = sampler_.windows(std::span(offsets).subspan(mine.begin, mine.size()));
    return {b.inputs, b.targets, sampler_.batch_size()};
  }

  EvaluationSums evaluate(const ParamStore& params, const parallel::RowSplit& split, int part) override {
    if (!eval_) {
      eval_model_ = build(validation_.windows_per_batch(), false);
      eval_ = std::make_unique<ProgramExecutor>(
          parallel::lower_single(eval_model_.graph, eval_model_.loss, {}, batch_input_names(eval_model_), false,
                                 precision_),
          AxisGroups{});
    }
    eval_->use_parameters(params);
    EvaluationSums sums;
    const parallel::RowRange mine = split.rows_of(validation_.num_batches(), part);
    for (int64_t i = mine.begin; i < mine.end; ++i) {
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
  int64_t units_per_row() const override { return model_.gpt.block; }

 private:
  nn::ModelConfig model_;
  Precision precision_;
  TextCorpus corpus_;
  WindowSampler sampler_;
  ValidationWindows validation_;
  nn::Model eval_model_;
  std::unique_ptr<ProgramExecutor> eval_;  // a one-rank forward program
};

}  // namespace

std::unique_ptr<Task> make_classification_task(const nn::ModelConfig& model, const DataOptions& data,
                                               uint64_t seed, Precision precision);

std::unique_ptr<Task> make_task(const nn::ModelConfig& model, const DataOptions& data, uint64_t seed,
                                Precision precision) {
  if (model.kind == "gpt") return std::make_unique<LanguageModelTask>(model, data, seed, precision);
  if (nn::is_onnx_path(model.kind)) {
    // An imported model's task is its main input's dataset: token windows
    // as long as its (B, T) input, or images.
    const nn::Model probe = nn::build_model(model, 1, false);
    const TensorSpec& input = probe.graph.spec(probe.inputs);
    if (input.dtype != DType::f32) {
      nn::ModelConfig windows = model;
      windows.gpt.block = input.shape[1];
      return std::make_unique<LanguageModelTask>(windows, data, seed, precision);
    }
  }
  return make_classification_task(model, data, seed, precision);
}

}  // namespace px
