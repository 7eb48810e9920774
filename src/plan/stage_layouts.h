// The stage search's space (plan/stage_search.h): every way to lay a model
// out as P pipeline stages of one sub-mesh shape dp x tp (parallax's mesh is
// uniform, so Alpa's choice of sub-meshes becomes the choice of (dp, tp)
// per P), with sequence parallelism, micro-batches, recomputation, the
// schedule and ZeRO's stage. Cheap: nothing is lowered.
#pragma once

#include <vector>

#include "parallel/strategy.h"
#include "plan/search.h"

namespace px::plan {

struct StageLayout {
  int stages, dp, tp;
  bool sp;
  int micro_batches;
  parallel::Recompute recompute;
  parallel::PipelineKind kind;
  int zero;
  int virtual_stages = 1;  // model chunks per rank (interleaved: 2)
};

// Every layout of the request's space with at most `most_stages` stages
// (a model's blocks, or the places its graph can be cut): tensor groups
// within a node, micro-batches 1, 2, 4, ... up to a data rank's rows (and
// max(the space's most, 8 x stages)), ZeRO-3 only without stages; with
// schedules, interleaved 1F1B of two chunks a rank too (Megatron-LM's),
// where the micro-batches are a multiple of the stages and every chunk
// gets a block.
std::vector<StageLayout> stage_layouts(const PlanRequest& request, int most_stages);

}  // namespace px::plan
