// The grid of strategies the planner considers for a model on some ranks:
// every mesh pp x dp x ep x cp x tp that multiplies to the ranks (tensor
// parallelism only on models Megatron's rules split, with and without
// sequence parallelism; pipelines only with at least two layers a stage;
// context parallelism on models with attention, by the balanced ring and by
// all-to-all; expert parallelism on models with a mixture of experts, up
// to its expert count, without ZeRO or context parallelism), the
// micro-batch counts 1, 2, 4, ... up to the rows a data rank holds, the
// schedules, ZeRO stages and recomputation. Strategies that do not
// validate or lower are left out by the caller that lowers them.
//
// A grid at scale is large (tens of thousands of points on 3072 ranks),
// and building and validating a point's Strategy checks its pipeline
// schedule, so a search walks the points and builds each Strategy only
// when it gets to it (grid_strategy); grid() builds them all.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "parallel/strategy.h"

namespace px::plan {

struct SearchSpace {
  int ranks = 1;
  int64_t batch = 1;  // global rows
  std::vector<std::string> batch_inputs;
  int max_micro_batches = 16;
  bool tensor = true;      // tp > 1 (and sequence parallelism)
  bool context = true;     // cp > 1 (the ring and all-to-all)
  bool experts = true;     // ep > 1 (models with a mixture of experts)
  bool pipeline = true;    // pp > 1
  bool zero = true;        // ZeRO stages 1-3 besides 0
  bool recompute = true;   // selective and full besides none
  bool schedules = true;   // every schedule; else 1F1B only
  Precision precision = Precision::fp32;  // every candidate's (not varied: Strategy::precision)
};

// What the candidate is, for tables: "pp=2 dp=1 tp=2 sp M=4 1f1b zero=1 recompute=full"
// (with "cp=2 ring" after dp under context parallelism, "ep=2" under
// expert parallelism).
std::string describe(const parallel::Strategy& strategy);

// One point of the grid: a mesh pp x dp x ep x cp x tp (dp = ranks / pp /
// ep / cp / tp) and what runs on it.
struct GridPoint {
  int pp = 1, tp = 1, cp = 1, ep = 1;
  parallel::ContextMethod method = parallel::ContextMethod::ring;
  bool sp = false;  // sequence parallelism
  int micro_batches = 1;
  parallel::PipelineKind kind = parallel::PipelineKind::one_f_one_b;
  int zero = 0;
  parallel::Recompute recompute = parallel::Recompute::none;
  bool operator==(const GridPoint&) const = default;
};

// Every point, cheapest meshes first; no Strategy is built or validated.
std::vector<GridPoint> grid_points(const Graph& graph, const SearchSpace& space);
// The point's Strategy; nullopt when it does not validate.
std::optional<parallel::Strategy> grid_strategy(const Graph& graph, const SearchSpace& space, const GridPoint& point);
// Every point's Strategy that validates.
std::vector<parallel::Strategy> grid(const Graph& graph, const SearchSpace& space);

// 1 .. n's divisors, ascending: the sizes a mesh axis of n ranks can take.
std::vector<int> divisors(int n);

}  // namespace px::plan
