// The Alpa-style search for models of repeated blocks ("h.<i>"), fast at
// any scale: instead of lowering every candidate, it lowers probes (for a
// graph without blocks, see search_graph_stages below).
//
// A probe is a one- and a two-block copy of the model on one stage's
// sub-mesh shape (dp = 1, tp, sequence parallelism), one micro-batch of b
// rows and a recomputation mode, replayed by the simulator on the request's
// estimator. Its trace gives each part's forward and backward seconds (the
// embedding "pre", a block, the head and loss "post", tensor-parallel
// collectives included); the two copies' activation peaks give a block's
// stashed bytes; the Program gives each part's parameters and the bytes a
// stage cut sends.
//
// For every (stages P, sub-mesh dp x tp, sequence parallelism, micro-batches
// M, recomputation, schedule, ZeRO stage) a dynamic program over the stage
// cuts gives the blocks of each stage that minimize the slowest stage
// t_max (F + B a micro-batch) subject to each stage's memory:
//   memory_s = parameters, gradients and optimizer state (ZeRO-sharded,
//              a bf16 copy under mixed precision)
//            + in-flight_s x stashed bytes (GPipe: M; 1F1B, zb-h1: P - s)
//   step     = sum_s t_s + (M - 1) t_max            (GPipe, 1F1B)
//              M t_max + (P - 1) F_max              (zb-h1: weight gradients fill the bubble)
//            + stage hops + the slowest stage's exposed data-parallel
//              gradient reduction (overlapping its last backward) and update.
// parallax's mesh is uniform, so every stage gets the same sub-mesh shape:
// Alpa's choice of sub-meshes becomes the choice of (dp, tp) per P.
// Layouts are scored in a fixed shuffled order until the deadline
// (plan/deadline.h), so a cut search has sampled the whole space; a layout
// no cut fits gets its memory but no step. The fastest few candidates that
// fit are then replayed on their real Programs (plan/search.h evaluate)
// within the budget.
#pragma once

#include <chrono>
#include <vector>

#include "plan/search.h"

namespace px::plan {

struct StageSearch {
  const PlanRequest* request = nullptr;
  const CostEstimator* estimator = nullptr;
  const nn::Model* model = nullptr;
  int considered = 0;  // set by search_stages: candidates in the space (those whose probe lowers)
  bool cut = false;    // set by search_stages: the deadline passed before every candidate was estimated
                       // (or before the verifications were replayed)
};

// Every candidate estimated before the deadline (fitting or rejected), the
// verified ones with their simulated figures. A graph without blocks goes
// to search_graph_stages.
std::vector<Candidate> search_stages(StageSearch& search, const Deadline& deadline);

// The search on a graph without repeated blocks (an imported ONNX graph,
// fixed as exported: nothing to probe): every layout of the same space
// composed with its stages cut by cost at the graph's narrowest node
// boundaries (parallel/lower/stages.h), as `--pp` cuts them, the cuts
// named in the strategy as `--stage-cuts` names them, and replayed on
// its Programs (evaluate), until the deadline. Every candidate it returns
// is simulated.
std::vector<Candidate> search_graph_stages(StageSearch& search, const Deadline& deadline);

}  // namespace px::plan
