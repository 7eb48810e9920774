// Parameter-server training (docs/parameter_server.md): a runtime mode beside
// the data-parallel trainer. Ranks 0..K-1 serve contiguous shards of the
// flat parameters and their optimizer state; the other ranks are workers
// that pull parameters, compute gradients on their shard of each global
// batch and push them. Modes bsp, asp and ssp (staleness bound s) decide
// when a pull may be answered and when gradients are applied.
#pragma once

#include <ostream>

#include "comm/communicator.h"
#include "runtime/train/trainer.h"

namespace px {

// Run by every rank of `world` (o.ps.mode set). Rank 0 (server 0) writes the
// log, the metrics (the global batch's loss per step, as the rows-weighted
// sum of the workers' losses of that clock), evaluates the gathered
// parameters at the end and saves the checkpoint (normal format: any rank
// count can resume it, data-parallel too). Rank 0's result holds the losses
// and the largest staleness any worker computed with.
TrainResult train_parameter_server(TrainOptions options, comm::Communicator& world, std::ostream& log);

}  // namespace px
