// The optimizer a data-parallel rank trains with under its strategy (the
// rank's stages: rank_trainer.h; the job: runtime/launch).
#include "runtime/train/trainer.h"

namespace px {

OptimizerConfig optimizer_for_strategy(OptimizerConfig optimizer, const parallel::Strategy& strategy) {
  if (strategy.lowering.local_momentum > 0) optimizer.momentum = 0;  // applied by the ranks instead
  return optimizer;
}

}  // namespace px
