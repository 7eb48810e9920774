#include "runtime/compiled_model.h"

namespace px {

CompiledModel::CompiledModel(nn::Model model, bool training) : model_(std::move(model)), training_(training) {
  Graph& g = model_.graph;
  std::vector<ValueId> wanted{model_.loss};
  if (training) {
    Gradients grads = build_backward(g, model_.loss, g.params());
    for (ValueId p : g.params()) {
      grad_names_.push_back(g.value(p).name);
      wanted.push_back(grads.at(p));
    }
  } else {
    wanted.push_back(model_.logits);
  }
  executor_ = std::make_unique<Executor>(g, wanted);
}

StepOutput CompiledModel::run(const ParamStore& params, const Tensor& inputs, const Tensor& targets,
                              uint64_t seed, int64_t row_offset) {
  const Graph& g = model_.graph;
  std::vector<Tensor> bound;
  params.bind(g, bound);
  auto expect = [&](ValueId id, const Tensor& t, const char* what) {
    if (t.shape() != g.spec(id).shape || t.dtype() != g.spec(id).dtype)
      fail("{} batch has shape {} {}, the model expects {}", what, t.shape(), dtype_name(t.dtype()),
           g.spec(id).str());
    bound[id] = t;
  };
  expect(model_.inputs, inputs, "input");
  expect(model_.targets, targets, "target");
  std::vector<Tensor> out = executor_->run(bound, {.seed = seed, .row_offset = row_offset});
  StepOutput result;
  result.loss = out[0].f32()[0];
  result.peak_bytes = executor_->peak_bytes();
  if (training_)
    for (size_t i = 0; i < grad_names_.size(); ++i) result.grads[grad_names_[i]] = out[i + 1];
  else
    result.logits = out[1];
  return result;
}

}  // namespace px
