// The strategy and optimizer a data-parallel rank trains with, from its
// options (the rank's stages: rank_trainer.h; the job: runtime/launch).
#include "runtime/train/trainer.h"

#include "parallel/compose.h"

namespace px {

parallel::Strategy strategy_for(const TrainOptions& o, const nn::Model& model, int world) {
  return parallel::compose(o.strategy, {.graph = &model.graph,
                                    .batch_inputs = batch_input_names(model),
                                    .ranks = world,
                                    .micro_batches = static_cast<int>(o.accumulation),
                                    .grad_clip = o.grad_clip,
                                    .sgd_momentum = o.optimizer.kind == "sgd" ? o.optimizer.momentum : 0});
}

OptimizerConfig optimizer_for_strategy(OptimizerConfig optimizer, const parallel::Strategy& strategy) {
  if (strategy.lowering.local_momentum > 0) optimizer.momentum = 0;  // applied by the ranks instead
  return optimizer;
}

}  // namespace px
