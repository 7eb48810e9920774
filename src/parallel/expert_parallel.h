// Expert parallelism (DeepSpeed-MoE; Strategy::expert_ranks): the mesh
// axis "ep", right after the data axis, whose ranks each hold a block of
// every mixture-of-experts layer's experts and route their own tokens.
//
//   tokens        split over data x expert ranks (Strategy::row_split):
//                 along the expert axis every value is B, each rank's
//                 rows its own, and the data path's collectives run over
//                 data x expert ranks (MeshGroups::data), so the
//                 non-expert gradients are summed over both
//   experts       the weights the experts' ops read (moe_linear's and
//                 moe_bias_add's) S(0) along the axis: rank r holds
//                 core/block.h's block r of the E experts; their gradients
//                 come out S(0) there (the routed signatures,
//                 graph/placement.h) and are reduced over the data axis
//                 alone, the expert-data group
//   the exchange  route_to_experts: each layer's token copies through
//                 moe_dispatch to the ranks of their experts and back by
//                 moe_undispatch (graph/ops/moe_dispatch.cc), lowered to
//                 Route instructions: counts agreed, then an all-to-all-v
//
// The router is never split: every rank routes its own rows with the
// same fp32 logits, so the routing does not depend on the strategy.
#pragma once

#include <vector>

#include "graph/graph.h"
#include "parallel/strategy.h"

namespace px::parallel {

// Every expert weight (a parameter moe_linear or moe_bias_add reads as its
// experts' weight) S(0) along the expert axis. px::Error when the model
// has no experts, or a layer has fewer experts than `ranks`.
std::vector<PlacementSeed> expert_parallel_seeds(const Graph& graph, int ranks);

// The rewrite before autodiff: in each expert layer (the nodes from a
// moe_expand's copies up to the moe_combine that sums them), the copies go
// through moe_dispatch, the experts' ops read the dispatched rows and
// their experts among the rank's, and moe_undispatch brings their output
// back before the combine. Autodiff then makes each the other's gradient.
void route_to_experts(Graph& graph);

}  // namespace px::parallel
