// Image classification on Fashion-MNIST with the MLP or the CNN.
#include <algorithm>

#include "data/fashion_mnist.h"
#include "data/sampler.h"
#include "nn/cnn.h"
#include "nn/mlp.h"
#include "parallel/lower.h"
#include "parallel/row_split.h"
#include "runtime/executor/program_executor.h"
#include "runtime/tasks/task.h"

namespace px {
namespace {

constexpr int64_t kEvalBatch = 1000;

class ClassificationTask : public Task {
 public:
  ClassificationTask(const nn::ModelConfig& model, const DataOptions& data, uint64_t seed, Precision precision)
      : model_(model),
        precision_(precision),
        data_(data),
        train_(shared_fashion_mnist(data_dir(), FashionMnistSplit::train)),
        test_(shared_fashion_mnist(data_dir(), FashionMnistSplit::test)),
        sampler_(train_->size(), data.batch, seed, data.drop_last) {}

  nn::Model build(int64_t batch, bool training) const override { return nn::build_model(model_, batch, training); }

  DataBatch next_batch(const parallel::RowSplit& split, int rank) override {
    EpochBatch b = sampler_.next_batch();
    const parallel::RowRange mine = split.rows_of(b.global_rows, rank);
    b.indices = {b.indices.begin() + mine.begin, b.indices.begin() + mine.end};
    return {train_->images(b.indices), gather_rows(train_->labels, b.indices), b.global_rows};
  }

  int64_t steps_per_epoch() const override { return sampler_.batches_per_epoch(); }

  EvaluationSums evaluate(const ParamStore& params, const parallel::RowSplit& split, int part) override {
    double loss_sum = 0, rows_seen = 0;
    // --eval-batches batches of kEvalBatch test images (the default covers all 10,000).
    int64_t correct = 0, n = std::min(test_->size(), data_.eval_batches * kEvalBatch);
    bool classifies = true;
    const parallel::RowRange mine = split.rows_of((n + kEvalBatch - 1) / kEvalBatch, part);  // in batches
    for (int64_t begin = mine.begin * kEvalBatch; begin < std::min(n, mine.end * kEvalBatch); begin += kEvalBatch) {
      int64_t rows = std::min(kEvalBatch, n - begin);
      rows_seen += double(rows);
      Evaluator& evaluator = evaluator_for(rows);
      evaluator.executor->use_parameters(params);
      Tensor labels = test_->labels.slice_rows(begin, begin + rows);
      StepResult out = evaluator.executor->run(
          {.feeds = feeds_of(evaluator.model, {test_->images(begin, begin + rows), labels})});
      loss_sum += out.loss * double(rows);
      classifies = evaluator.model.logits != kNoValue;
      if (!classifies) continue;  // a regression: no class scores to rank
      const Tensor& logit_tensor = out.outputs.front().front();  // (rows, classes)
      const float* logits = logit_tensor.f32();
      int64_t classes = logit_tensor.dim(1);
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = logits + r * classes;
        int64_t best = std::max_element(row, row + classes) - row;
        correct += best == labels.data<int32_t>()[r];
      }
    }
    return {.loss = loss_sum, .weight = rows_seen, .correct = classifies ? double(correct) : -1};
  }

  nlohmann::json data_state() const override { return sampler_.state(); }
  void restore_data_state(const nlohmann::json& state) override {
    sampler_.set_state(state.get<EpochSamplerState>());
  }
  const char* unit() const override { return "img"; }
  int64_t units_per_row() const override { return 1; }

 private:
  std::string data_dir() const {
    return data_.path.empty() ? std::string(kFashionMnistDefaultDir) : data_.path;
  }
  // A one-rank forward program per evaluation batch size, returning the
  // logits (none for a regression: an imported model under --loss mse).
  struct Evaluator {
    nn::Model model;
    std::unique_ptr<ProgramExecutor> executor;
  };
  Evaluator& evaluator_for(int64_t rows) {
    auto it = evaluators_.find(rows);
    if (it != evaluators_.end()) return it->second;
    Evaluator e{build(rows, false), nullptr};
    e.executor = std::make_unique<ProgramExecutor>(
        parallel::lower_single(e.model.graph, e.model.loss,
                               e.model.logits == kNoValue ? std::vector<ValueId>{} : std::vector{e.model.logits},
                               batch_input_names(e.model), false, precision_),
        AxisGroups{});
    return evaluators_.emplace(rows, std::move(e)).first->second;
  }

  nn::ModelConfig model_;
  Precision precision_;
  DataOptions data_;
  std::shared_ptr<const LabeledImages> train_, test_;  // shared with the other in-process ranks
  EpochSampler sampler_;
  std::map<int64_t, Evaluator> evaluators_;
};

}  // namespace

std::unique_ptr<Task> make_classification_task(const nn::ModelConfig& model, const DataOptions& data,
                                               uint64_t seed, Precision precision) {
  return std::make_unique<ClassificationTask>(model, data, seed, precision);
}

}  // namespace px
