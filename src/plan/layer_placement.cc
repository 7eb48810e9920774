#include "plan/layer_placement.h"

#include "core/error.h"

namespace px::plan {

std::string_view layer_placement_name(LayerPlacement placement) {
  switch (placement) {
    case LayerPlacement::replicated: return "replicated";
    case LayerPlacement::column: return "column";
    case LayerPlacement::row: return "row";
    case LayerPlacement::pair: return "split";
  }
  return "?";
}

std::vector<LayerPlacement> placements_of(const parallel::SplitUnit& unit) {
  if (unit.block()) return {LayerPlacement::replicated, LayerPlacement::pair};
  return {LayerPlacement::replicated, LayerPlacement::column, LayerPlacement::row};
}

void seed_layer(parallel::Strategy& strategy, const parallel::SplitUnit& unit, LayerPlacement placement) {
  auto add = [&](const std::vector<parallel::PlacementSeed>& seeds) {
    strategy.seeds.insert(strategy.seeds.end(), seeds.begin(), seeds.end());
  };
  const parallel::GemmLayer& first = unit.layers.front();
  switch (placement) {
    case LayerPlacement::replicated: break;
    case LayerPlacement::column: add(parallel::column_seeds(first, "tp")); break;
    case LayerPlacement::row: add(parallel::row_seeds(first, "tp")); break;
    case LayerPlacement::pair:
      PX_CHECK(unit.block(), "seed_layer: a pair placement for the lone layer {}", unit.name);
      add(parallel::column_seeds(first, "tp", unit.groups));
      add(parallel::row_seeds(unit.layers[1], "tp"));
      break;
  }
}

double exchange_seconds(const CostEstimator& estimator, LayerPlacement from, LayerPlacement to, double bytes, int tp,
                        LinkClass link) {
  if (tp <= 1 || from == LayerPlacement::replicated || from == LayerPlacement::pair || to == LayerPlacement::pair)
    return 0;
  using comm::Collective;
  if (from == LayerPlacement::column)
    return to == LayerPlacement::row ? 0.0
                                     : estimator.collective_seconds(Collective::allgather, bytes, tp, link) +
                                           estimator.collective_seconds(Collective::reduce_scatter, bytes, tp, link);
  return to == LayerPlacement::row ? 2 * estimator.collective_seconds(Collective::reduce_scatter, bytes, tp, link)
                                   : 2 * estimator.collective_seconds(Collective::allreduce, bytes, tp, link);
}

}  // namespace px::plan
