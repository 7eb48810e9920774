// Work split by speed on a heterogeneous cluster (plan/cluster.h's
// node_devices): a data-parallel rank's rows in proportion to its rate, and
// a pipeline stage's share of the layers, so that ranks of different speeds
// finish their work together instead of every rank waiting for the slowest
// at the gradient allreduce or the next stage's receive.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "parallel/strategy.h"
#include "plan/cluster.h"

namespace px::plan {

// The row shares (parallel/row_split.h) that give each data rank of
// `strategy` rows in proportion to its speed on `cluster`: a data rank's
// speed is its slowest rank's (its pipeline stages and model-parallel
// ranks wait for each other), shares are those speeds over the fastest's
// in thousandths (at least 1). Empty when every data rank runs at one
// speed (the even split is then the same) or the mesh has one data rank.
std::vector<int64_t> speed_shares(const ClusterSpec& cluster, const parallel::Strategy& strategy);

// Each pipeline stage's speed on `cluster` (its slowest rank's, over
// `device`'s), or empty when the strategy has one stage or every stage
// runs at one speed.
std::vector<double> stage_speeds(const ClusterSpec& cluster, const parallel::Strategy& strategy);

// The layers (as --stage-cuts names them) that start stages 1, 2, ... of
// `strategy`'s pipeline on `cluster` when each stage's share of the forward
// graph's cost follows its speed (parallel/lower/stages.h's balanced cut),
// or nullopt when the stages run at one speed or the cut cannot be named.
std::optional<std::vector<std::string>> stage_cuts_by_speed(const Graph& forward, const ClusterSpec& cluster,
                                                            const parallel::Strategy& strategy);

// `shares` as people read them: "1000:1000:1000:250".
std::string shares_text(const std::vector<int64_t>& shares);

}  // namespace px::plan
