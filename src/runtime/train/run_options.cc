#include "runtime/train/run_options.h"

#include "core/error.h"

namespace px {

void validate(const RunOptions& o) {
  if (o.steps < 0 || o.epochs < 0) fail("steps {} and epochs {} must be >= 0", o.steps, o.epochs);
  if (o.steps == 0 && o.epochs == 0) fail("give --steps or --epochs (both are 0)");
  if (o.threads < 1) fail("threads {} must be >= 1", o.threads);
  if (o.eval_every < 0) fail("--eval-every {} must be >= 0", o.eval_every);
  if (o.stop_after < 0) fail("stop-after step {} must be >= 0", o.stop_after);
  if (!(o.straggler_threshold > 1.0))
    fail("--straggler-threshold {} must be above 1 (a rank's step compute against the fastest rank's)",
         o.straggler_threshold);
}

}  // namespace px
