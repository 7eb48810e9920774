// The planner's searches: given a model, a global batch and a cluster, the
// strategy with the shortest predicted step that fits in device memory.
//
//   grid   every candidate of the grid (plan/candidates.h) lowered and
//          replayed by the simulator (one rank per stage, plan/simulate.h),
//          as long as the budget lasts, cheapest meshes first.
//   layerwise  OptCNN-style: each fully-connected layer of a chain placed
//          on the tensor axis by a dynamic program (plan/layer_search.h),
//          the rest data-parallel, against plain data parallelism.
//   mcmc   FlexFlow-style: Markov chain Monte Carlo over per-layer
//          placements with delta simulation (plan/mcmc_search.h), against
//          plain data parallelism.
//   alpa   for models of repeated blocks ("h.<i>"): per-layer costs from
//          probes (a two-block copy of the model lowered for each stage
//          sub-mesh shape, micro-batch size and recomputation, and
//          replayed), then for every (stages, sub-mesh, micro-batches,
//          schedule, ZeRO) a dynamic program over the stage cuts that
//          minimizes the slowest stage under the memory of each stage's
//          in-flight micro-batches; the best few are verified by the
//          simulator on their real Programs (plan/stage_search.h). A
//          graph without blocks (an imported ONNX graph) is cut by cost
//          at its narrowest node boundaries for each layout, and every
//          layout replayed on its Programs.
//   auto   alpa for block models whose grid would not fit the budget (one
//          candidate's replay times the grid's size, or over 1000
//          candidates), else grid, and for models without blocks the
//          layer-wise placements beside it.
//
// Every candidate is kept with its figures or the reason it was rejected
// (does not fit in memory; does not lower). The budget is a bound: every
// search asks a Deadline (plan/deadline.h) wherever time goes and returns
// what it has when it passes, saying so (PlanResult::budget_exhausted).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "nn/model.h"
#include "plan/candidates.h"
#include "plan/cluster.h"
#include "plan/deadline.h"
#include "plan/estimator.h"

namespace px::plan {

struct PlanRequest {
  // The model for `batch` global rows; `layers` > 0 asks for a copy with
  // that many blocks (the alpa probes), 0 for the model itself.
  std::function<nn::Model(int64_t batch, int64_t layers)> build;
  std::vector<std::string> batch_inputs;
  int64_t batch = 1;
  int ranks = 1;
  const ClusterSpec* cluster = nullptr;
  ProfiledEstimator::Options local;        // the local spec's run: threads, link limit, algorithm
  bool overlap = true;
  int optimizer_slots = 2;
  double budget_seconds = 10;              // a bound: plan() returns within it and a fraction of a second
  std::string method = "auto";             // auto, grid, layerwise, mcmc or alpa
  SearchSpace space;                       // what may vary (ranks and batch are taken from here)
  int verify = 4;                          // alpa: candidates replayed on their Programs
  const CostEstimator* estimator = nullptr;  // tests: this one instead of the cluster's
  bool mcmc_delta = true;                  // mcmc: delta simulation (false: full, for comparison)
};

struct Candidate {
  parallel::Strategy strategy;
  std::string description;   // plan/candidates.h describe()
  double step_seconds = 0;   // predicted
  double peak_bytes = 0;     // the fullest device's
  double utilization = 0;    // executed FLOPs / (step x devices x peak FLOP/s)
  bool simulated = false;    // replayed on its Programs (else the alpa screen's estimate)
  double screened_step_seconds = 0;  // alpa: the screen's estimate, kept beside a replay's figures
  double screened_peak_bytes = 0;
  std::string rejected;      // why it cannot run; empty when it fits
};

struct PlanResult {
  std::string method;               // the search that ran
  std::vector<Candidate> ranked;    // fitting candidates, fastest first
  std::vector<Candidate> rejected;  // the others, with their reasons
  int evaluated = 0;                // candidates estimated
  int considered = 0;               // candidates in the search space (an upper bound when cut: points not
                                    // reached may not validate)
  double seconds = 0;               // the search's wall time
  double budget_seconds = 0;        // the request's
  // The budget ran out before the search covered its space: the result is
  // the best of the `evaluated` of `considered` (or, for alpa, fewer replays).
  bool budget_exhausted = false;
  int proposals = 0;                // mcmc: proposals evaluated
  double proposals_per_second = 0;
  // The simplest candidate (kTieTolerance) among those predicted within 2%
  // of the fastest: the prediction cannot tell them apart, and fewer moving
  // parts (ZeRO, stages, micro-batches, tensor splits, recomputation) cost
  // less than it models. px::Error when nothing fits, naming the closest.
  const Candidate& best() const;
  // Share of the space estimated, in [0, 1].
  double coverage() const { return considered > 0 ? std::min(1.0, double(evaluated) / considered) : 0; }
};

constexpr double kTieTolerance = 0.02;
// How many mechanisms a strategy stacks: ZeRO's stage, pipeline stages,
// log2 of the micro-batches, a tensor axis, sequence parallelism,
// recomputation.
int complexity(const parallel::Strategy& strategy);

PlanResult plan(const PlanRequest& request);

// Wall seconds since `start`.
double seconds_since(std::chrono::steady_clock::time_point start);

// The estimator a request calls for on its cluster.
std::unique_ptr<CostEstimator> estimator_for(const PlanRequest& request);

// Replays `strategy` (one rank per stage) and checks it against device
// memory: the grid's evaluation, and the alpa search's verification.
// DeadlinePassed when `deadline` passes before the replay ends.
Candidate evaluate(const PlanRequest& request, const nn::Model& model, const parallel::Strategy& strategy,
                   const CostEstimator& estimator, const Deadline* deadline = nullptr);

// Whether `peak` bytes a device (the fullest) fit the cluster for a mesh of
// `ranks`; the reason when not.
std::string memory_verdict(const ClusterSpec& cluster, int ranks, double peak);

}  // namespace px::plan
