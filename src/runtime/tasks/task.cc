#include "runtime/tasks/task.h"

#include "nn/cnn.h"
#include "nn/gpt.h"
#include "nn/mlp.h"

namespace px {

std::vector<std::pair<ValueId, Tensor>> feeds_of(const nn::Model& model, const DataBatch& batch) {
  return {{model.inputs, batch.inputs}, {model.targets, batch.targets}};
}

void validate(const DataOptions& data) {
  if (data.batch <= 0) fail("batch size {} must be positive", data.batch);
  if (data.eval_batches <= 0) fail("eval batches {} must be positive", data.eval_batches);
}

ParamStore initial_parameters(const Graph& graph, uint64_t seed) {
  ParamStore store = ParamStore::initialize(graph, seed);
  for (ValueId id : graph.params()) {
    const Value& v = graph.value(id);
    if (v.init.values == nullptr) continue;
    PX_CHECK(v.init.values->shape() == v.spec.shape, "param {}", v.name);
    store.at(v.name).copy_from(*v.init.values);
  }
  return store;
}

}  // namespace px
