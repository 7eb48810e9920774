#include "runtime/tasks/task.h"

#include "nn/cnn.h"
#include "nn/gpt.h"
#include "nn/mlp.h"

namespace px {

nn::Model build_model(const TrainOptions& o, int64_t batch, bool training) {
  if (o.model == "gpt") return nn::build_gpt(o.gpt, batch, o.gpt.block, training);
  if (o.model == "mlp") return nn::build_mlp(o.mlp, batch);
  if (o.model == "cnn") return nn::build_cnn(o.cnn, batch);
  fail("model '{}' is unknown: expected mlp, cnn or gpt", o.model);
}

std::vector<std::string> batch_input_names(const nn::Model& model) {
  return {model.graph.value(model.inputs).name, model.graph.value(model.targets).name};
}

std::vector<std::pair<ValueId, Tensor>> feeds_of(const nn::Model& model, const DataBatch& batch) {
  return {{model.inputs, batch.inputs}, {model.targets, batch.targets}};
}

}  // namespace px
