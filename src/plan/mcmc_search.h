// The FlexFlow-style search: Markov chain Monte Carlo over per-layer
// placements on the tensor axis of a mesh dp x tp, with delta simulation.
//
// The units placed are the model's layers that can be split, found by the
// graph's structure (parallel/split_units.h), so imported ONNX graphs are
// placed like built-in models: each lone fully-connected or convolution
// layer (replicated, column or row, as in plan/layer_search.h) and each
// transformer block's
// attention and MLP (replicated, or Megatron's column-then-row pair). The
// embedding and everything else stay replicated along tp and
// data-parallel along dp.
//
// A placement is simulated as a task graph of its units: each unit's
// forward and backward computes (a split unit computes 1/tp of them), its
// gradient's reduction along dp, and the activation exchanges between
// consecutive units as the resharding rule would run them (a split pair's
// allreduce forward and backward; a column layer's gather or a row layer's
// sum). Every task's time comes from the estimator on the unit's nodes of
// the model lowered data-parallel.
//
// A proposal re-places one unit. Full simulation re-times every task of
// every unit; delta simulation re-times only the proposal's unit and the
// exchanges on its two sides, reusing every other task's time from the
// current state (FlexFlow, Jia et al. 2019, section 5.3). Proposals are
// accepted by the Metropolis rule (always when faster, with probability
// exp(-beta * relative slowdown) otherwise). The best placement of each
// mesh is then replayed on its Programs (plan/search.h evaluate).
#pragma once

#include <chrono>
#include <vector>

#include "plan/search.h"

namespace px::plan {

struct McmcSearch {
  const PlanRequest* request = nullptr;
  const CostEstimator* estimator = nullptr;
  const nn::Model* model = nullptr;
  bool delta = true;        // delta simulation (false: every proposal fully re-simulated)
  int proposals_per_mesh = 0;  // > 0: exactly this many a mesh (tests); else half the budget, shared
  int proposals = 0;        // out: proposals evaluated
  double seconds = 0;       // out: spent evaluating them
  bool cut = false;         // out: the deadline passed before every mesh's best placement was replayed
  double proposals_per_second() const { return seconds > 0 ? proposals / seconds : 0; }
};

// Replayed candidates: the best placement of every mesh dp x tp (tp > 1)
// (empty when the model has no units to place).
std::vector<Candidate> search_mcmc(McmcSearch& search, const Deadline& deadline);

}  // namespace px::plan
