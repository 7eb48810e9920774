// The stage search's probes (plan/stage_search.h): a one- and a two-block
// copy of the model on one stage's sub-mesh shape (dp = 1, tp, sequence
// parallelism), one micro-batch of `rows` rows and a recomputation mode,
// replayed on the request's estimator. The replay's trace gives each
// part's forward and backward seconds (the embedding "pre", a block, the
// head and loss "post", tensor-parallel collectives included); the two
// copies' activation peaks give a block's stashed bytes; the Program gives
// each part's parameters and the bytes a stage cut sends.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

#include "graph/graph.h"
#include "parallel/strategy.h"
#include "plan/deadline.h"
#include "plan/estimator.h"
#include "plan/search.h"

namespace px::plan {

// "h.<i>..." -> i, else -1.
int block_of(const std::string& name);
// Blocks "h.<i>" of the graph.
int block_count(const Graph& graph);

// What one part of the model costs a micro-batch on one rank of a stage.
struct ProbePart {
  double forward = 0, backward = 0;  // seconds, tensor-parallel collectives included
  double weight = 0;                 // of backward: the weight-gradient leaves (zb-h1's W)
  double params = 0;                 // this rank's elements
  double seconds() const { return forward + backward; }
};

struct ProbeCosts {
  ProbePart pre, block, post;
  double shared_params = 0;  // read by pre and post both (GPT's tied embedding): reduced between the end stages
  double block_stash = 0;  // bytes a block keeps from its forward to its backward, a micro-batch
  double post_stash = 0;   // the head's and the loss's (the last stage's), a micro-batch
  double transient = 0;    // backward's working set beyond the stash (the head's, on the last stage)
  double boundary = 0;           // bytes a stage cut sends a micro-batch forward (as the Program's Send: bf16
                                 // where every reader past the cut takes the value at bf16 precision)
  double boundary_gradient = 0;  // and backward: the gradients, float32
  double block_flops = 0, base_flops = 0;  // executed by the tensor group a micro-batch
  double block_instrs = 0, base_instrs = 0;  // a micro-batch's instructions, summed over the stages
  double seconds_per_instr = 0;              // lowering and replaying the probes
  std::string error;       // the probe does not lower (e.g. heads not divisible)
};

struct ProbeKey {
  int tp;
  bool sp;
  int64_t rows;
  parallel::Recompute recompute;
  auto operator<=>(const ProbeKey&) const = default;
};

// The probe's costs; `error` set when its sub-mesh does not lower the
// model. DeadlinePassed once the deadline passes.
ProbeCosts probe(const PlanRequest& request, const CostEstimator& estimator, const ProbeKey& key,
                 const Deadline& deadline);

}  // namespace px::plan
