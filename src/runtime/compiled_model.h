// A model graph ready to run for one batch shape: for training, the forward
// graph plus its backward (gradients of every parameter); for evaluation,
// forward only. Binds parameters from a ParamStore by name.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "graph/autodiff.h"
#include "graph/executor.h"
#include "nn/model.h"
#include "runtime/param_store.h"

namespace px {

struct StepOutput {
  float loss = 0;
  Tensor logits;                         // evaluation only
  std::map<std::string, Tensor> grads;   // training only, by parameter name
  int64_t peak_bytes = 0;
};

class CompiledModel {
 public:
  CompiledModel(nn::Model model, bool training);
  const nn::Model& model() const { return model_; }
  // Runs one batch: inputs (rows, ...) and targets (rows, ...) of the graph's batch size.
  // `row_offset` is the batch's first row in a larger global batch (dropout
  // masks depend on seed and global row, so a shard draws what the whole would).
  StepOutput run(const ParamStore& params, const Tensor& inputs, const Tensor& targets, uint64_t seed,
                 int64_t row_offset = 0);

 private:
  nn::Model model_;
  bool training_;
  std::vector<std::string> grad_names_;
  std::unique_ptr<Executor> executor_;
};

}  // namespace px
