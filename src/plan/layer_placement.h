// Where one layer's weights sit on the tensor axis of a mesh dp x tp, for
// the searches that place layers one by one (plan/layer_search.h,
// plan/mcmc_search.h), and what changing placement between consecutive
// layers costs.
//
//   replicated  whole on every tp rank: the output is whole
//   column      a layer's output features split (a (in, out) weight S(1),
//               torch's (out, in) and a conv's S(0); bias S(0)): the output
//               is split by feature (a conv's by channel)
//   row         its input features split (the weight's other dim): the
//               output is a partial sum every tp rank holds a summand of
//   pair        a transformer block's attention or MLP as Megatron splits
//               it (column, then row, reduced inside): whole in, whole out
//
// The layers and blocks are parallel::split_units' (found by structure).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "parallel/split_units.h"
#include "parallel/strategy.h"
#include "plan/estimator.h"

namespace px::plan {

enum class LayerPlacement { replicated, column, row, pair };
std::string_view layer_placement_name(LayerPlacement placement);

// The placements a unit takes: a lone layer replicated, column or row; a
// block replicated or split as a pair.
std::vector<LayerPlacement> placements_of(const parallel::SplitUnit& unit);

// The seeds placing `unit` on the axis "tp".
void seed_layer(parallel::Strategy& strategy, const parallel::SplitUnit& unit, LayerPlacement placement);

// An activation of `bytes` from a layer placed `from` into the next placed
// `to`, forward and backward, as the resharding rule (parallel/lower/
// reshard.h) runs it over `tp` ranks: a split output gathered unless a row
// layer reads it split, a partial one summed, or scattered into a row
// layer's split input; its gradient from the dual of what `to` takes to
// the dual of what `from` gives (a split gradient gathered, a partial one
// scattered or summed; one left partial costs nothing here). Pairs take
// and give whole activations. `per_node`: the tp ranks on each node the
// group spans (CostEstimator::collective_seconds).
double exchange_seconds(const CostEstimator& estimator, LayerPlacement from, LayerPlacement to, double bytes, int tp,
                        LinkClass link, int per_node);

}  // namespace px::plan
