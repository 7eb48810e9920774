// The strategy `parallax train` flags describe (or --strategy gives whole),
// and the optimizer it needs (runtime/train/trainer.h).
#include <string>

#include "core/error.h"
#include "parallel/tensor_parallel.h"
#include "runtime/train/trainer.h"

namespace px {

parallel::Strategy strategy_for(const TrainOptions& o, const nn::Model& model, int world) {
  parallel::Strategy s;
  if (!o.sync.strategy.empty()) {
    s = parallel::load_strategy(o.sync.strategy);
    if (s.mesh.ranks() != world)
      fail("strategy '{}' has mesh {} of {} ranks; this job has {}", o.sync.strategy, s.mesh.str(), s.mesh.ranks(),
           world);
  } else {
    const int tp = o.sync.tensor_parallel, pp = o.sync.pipeline_parallel;
    if (o.sync.mesh_ranks > 0 && o.sync.mesh_ranks != world)
      fail("--mesh names {} ranks; this job has {}", o.sync.mesh_ranks, world);
    if (world % (tp * pp) != 0) fail("--pp {} x --tp {} does not divide the job's {} ranks", pp, tp, world);
    const int stage_ranks = world / pp;  // a stage's data x tensor ranks
    s = tp > 1 || o.sync.sequence_parallel
            ? parallel::tensor_parallel(model.graph, stage_ranks / tp, tp, batch_input_names(model),
                                        o.sync.sequence_parallel)
            : parallel::data_parallel(stage_ranks, batch_input_names(model));
    s.zero_stage = o.sync.zero_stage;
    s.micro_batches = static_cast<int>(o.accumulation);
    s.lowering.bucket_bytes = o.sync.bucket_bytes;
    s.lowering.compression = o.sync.compression;
    s.lowering.recompute = o.sync.recompute;
    if (pp > 1) s = parallel::with_pipeline(std::move(s), pp, o.sync.pipeline);
    // P3 updates each parameter as soon as its own gradient is in, and
    // every gradient is its own job with its own priority. (A strategy
    // file that computes a global norm is refused by the executor's
    // validation, naming both.)
    if (o.sync.p3_slice_bytes > 0) {
      if (o.grad_clip > 0)
        fail("P3 updates each layer as soon as its gradient arrives; --grad-clip {} needs every gradient first "
             "(give --grad-clip 0)",
             o.grad_clip);
      s.lowering.global_norm = false;
      s.lowering.bucket_bytes = 0;
    }
  }
  // Sparsified gradients with SGD momentum (DGC's momentum correction, Lin
  // et al. 2018): the momentum moves into the ranks, before compression,
  // and the optimizer applies the aggregated velocity without momentum of
  // its own (the trainer zeroes it: optimizer_for_strategy).
  using comm::compression::Method;
  const Method method = s.lowering.compression.method;
  if (s.data_ranks() > 1 && (method == Method::topk || method == Method::threshold) && o.optimizer.kind == "sgd" &&
      o.optimizer.momentum > 0 && s.lowering.local_momentum == 0)
    s.lowering.local_momentum = o.optimizer.momentum;
  parallel::validate(s);
  return s;
}

OptimizerConfig optimizer_for_strategy(OptimizerConfig optimizer, const parallel::Strategy& strategy) {
  if (strategy.lowering.local_momentum > 0) optimizer.momentum = 0;  // applied by the ranks instead
  return optimizer;
}

}  // namespace px
