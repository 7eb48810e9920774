#include "runtime/tasks/task.h"

#include "nn/cnn.h"
#include "nn/gpt.h"
#include "nn/mlp.h"

namespace px {

std::vector<std::pair<ValueId, Tensor>> feeds_of(const nn::Model& model, const DataBatch& batch) {
  return {{model.inputs, batch.inputs}, {model.targets, batch.targets}};
}

}  // namespace px
