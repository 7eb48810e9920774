// Image classification on Fashion-MNIST with the MLP or the CNN.
#include <algorithm>

#include "data/fashion_mnist.h"
#include "data/sampler.h"
#include "nn/cnn.h"
#include "nn/mlp.h"
#include "runtime/compiled_model.h"
#include "runtime/task.h"

namespace px {
namespace {

constexpr int64_t kEvalBatch = 1000;

class ClassificationTask : public Task {
 public:
  explicit ClassificationTask(const TrainOptions& o)
      : options_(o),
        train_(load_fashion_mnist(data_dir(), FashionMnistSplit::train)),
        test_(load_fashion_mnist(data_dir(), FashionMnistSplit::test)),
        sampler_(train_.size(), o.batch, o.seed) {}

  nn::Model build(int64_t batch, bool) const override {
    return options_.model == "mlp" ? nn::build_mlp(options_.mlp, batch) : nn::build_cnn(options_.cnn, batch);
  }

  DataBatch next_batch() override {
    EpochBatch b = sampler_.next_batch();
    return {gather_rows(train_.images, b.indices), gather_rows(train_.labels, b.indices)};
  }

  DataBatch next_batch(int rank, int world) override {
    EpochBatch b = sampler_.next_batch(rank, world);
    return {gather_rows(train_.images, b.indices), gather_rows(train_.labels, b.indices)};
  }

  int64_t steps_per_epoch() const override { return sampler_.batches_per_epoch(); }

  Evaluation evaluate(const ParamStore& params) override {
    double loss_sum = 0;
    int64_t correct = 0, n = test_.size();
    for (int64_t begin = 0; begin < n; begin += kEvalBatch) {
      int64_t rows = std::min(kEvalBatch, n - begin);
      auto& compiled = eval_model(rows);
      Tensor labels = test_.labels.slice_rows(begin, begin + rows);
      StepOutput out = compiled.run(params, test_.images.slice_rows(begin, begin + rows), labels, 0);
      loss_sum += double(out.loss) * double(rows);
      const float* logits = out.logits.f32();
      int64_t classes = out.logits.dim(1);
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = logits + r * classes;
        int64_t best = std::max_element(row, row + classes) - row;
        correct += best == labels.data<int32_t>()[r];
      }
    }
    return {loss_sum / double(n), double(correct) / double(n)};
  }

  nlohmann::json data_state() const override { return sampler_.state(); }
  void restore_data_state(const nlohmann::json& state) override {
    sampler_.set_state(state.get<EpochSamplerState>());
  }
  const char* unit() const override { return "img"; }
  int64_t units_per_row() const override { return 1; }

 private:
  std::string data_dir() const {
    return options_.data.empty() ? std::string(kFashionMnistDefaultDir) : options_.data;
  }
  CompiledModel& eval_model(int64_t rows) {
    auto it = eval_models_.find(rows);
    if (it == eval_models_.end())
      it = eval_models_.emplace(rows, std::make_unique<CompiledModel>(build(rows, false), false)).first;
    return *it->second;
  }

  TrainOptions options_;
  LabeledImages train_, test_;
  EpochSampler sampler_;
  std::map<int64_t, std::unique_ptr<CompiledModel>> eval_models_;
};

}  // namespace

std::unique_ptr<Task> make_classification_task(const TrainOptions& options) {
  return std::make_unique<ClassificationTask>(options);
}

}  // namespace px
