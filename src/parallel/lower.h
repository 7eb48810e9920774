// Lowering: graph + strategy -> the Program one rank runs (program.h), as a
// chain of pure passes, one file each under lower/:
//
//   propagate   placements of every value on every mesh axis; reshard nodes where they
//               change (lower/propagate.h)
//   reshard     the one rule: where placements change, which collective (lower/reshard.h)
//   plan_work   which nodes this rank runs, in which order: every node per micro-batch, or
//               its pipeline stages' nodes in its schedule's order with the transfers
//               between stages (lower/pipeline.cc)
//   recompute   forward nodes run again before the backward that reads what they made
//               (lower/recompute.cc)
//   localize    the rank's local graphs: values cut to its shard, one per micro-batch size
//   buckets     the flat parameter layout, gradient buckets (the one bucket rule), ZeRO blocks
//   schedule    the phases' computes and transfers, gradient accumulation, the collectives
//               the transitions need (ZeRO-3 gathers before each use), the loss
//   optimizer   the global norm (Norm, its allreduce when sharded, Clip), Update
//               after each shard's gradient is complete, the parameter gather
//               after a sharded update
//   liveness    the last use of every value and buffer; a Free after each buffer
//               instance's last read (lower/liveness.h)
//   back_pressure  ZeRO: a bucket buffer's first write after the reduction that frees
//               the one `bucket_buffers` earlier
//   facts       how each instruction runs: lane, group, sequence number, wire
//               bytes (lower/facts.cc)
//
// The graph is built once for the global batch: the loss carries the
// global scale (1/rows), so every rank's loss and gradients are summands of
// the global ones and accumulation needs no re-weighting.
#pragma once

#include <vector>

#include "graph/graph.h"
#include "parallel/program.h"
#include "parallel/strategy.h"

namespace px::parallel {

struct LowerRequest {
  const Graph* forward = nullptr;  // forward graph built for the global batch
  ValueId loss = kNoValue;         // a scalar; kNoValue: none (a forward-only Program, training false)
  // Also returned per micro-batch (evaluation: the logits), whole along
  // every axis but the data axis, as the loss is (a vocabulary-split head's
  // logits are gathered).
  std::vector<ValueId> outputs;
  // Returned after `outputs`, as this rank holds them (a decode step's k
  // and v of the rank's heads, written into its KV cache).
  std::vector<ValueId> shard_outputs;
  // Returned after those, whole along every axis, the data axis too (a
  // partial one allreduced there): a step's small statistics, a mixture
  // of experts' routing counts and losses (nn::RouterValues). On a
  // pipeline, only the stage that computes one returns it.
  std::vector<ValueId> reported;
  bool training = true;            // add backward, the gradient collectives and the updates
  // The collective algorithm the executor will run:
  // the wire bytes stamped on each instruction are that algorithm's.
  comm::CollectiveOptions collective;
  // Per mesh axis, what automatic chooses among on this rank's communicator
  // of that axis (comm::algorithm_menu; the run's, so each collective is
  // stamped with the algorithm that will run and hierarchical's node size
  // is the hosts'), then, with context parallelism, the data x context
  // group's (parallel/mesh.h's MeshGroups::data). Empty (a plan for
  // another cluster): automatic stays, its wire bytes the ring's.
  std::vector<comm::AlgorithmMenu> menus;
  // Gradients sharded (ZeRO): at most this many gradient bucket buffers
  // alive at once, backward waiting for the oldest reduction past that
  // (lower/back_pressure.cc).
  int bucket_buffers = 4;
};

// The program of `rank` (0 <= rank < strategy.mesh.ranks()). Throws
// px::Error naming what does not fit (a placement no op signature takes,
// fewer rows than ranks, ...).
Program lower(const LowerRequest& request, const Strategy& strategy, int rank);

// `strategy` with the stage cuts `program` (lowered from it) decided,
// named: a lowering for another batch size (an epoch's partial last batch)
// then cuts the stages before the same nodes, where balancing by cost
// might have moved them. Unchanged without a pipeline or with cuts given.
Strategy with_stage_cuts_of(Strategy strategy, const Program& program);

// A one-rank program over `model`'s graph in `precision`: evaluation and
// sampling (training false) or a parameter-server worker's gradients
// (training true: their norm and clip, no updates). `batch_inputs` are fed
// per step.
Program lower_single(const Graph& forward, ValueId loss, const std::vector<ValueId>& outputs,
                     const std::vector<std::string>& batch_inputs, bool training,
                     Precision precision = Precision::fp32);

}  // namespace px::parallel
