#include "plan/layer_placement.h"

#include <optional>

#include "core/error.h"
#include "parallel/lower/reshard.h"

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

namespace {

// The activation's feature dimension, split by a column layer's output and
// a row layer's input (only whether two splits are alike matters here).
constexpr int kFeature = 1;

// Along tp, the activation a unit placed `l` gives: whole (replicated; a
// pair reduces inside), split by feature (column) or partial (row).
Placement output_of(LayerPlacement l) {
  if (l == LayerPlacement::column) return Placement::S(kFeature);
  if (l == LayerPlacement::row) return Placement::P();
  return Placement::B();
}
// And the one it takes: split by feature (row) or whole.
Placement input_of(LayerPlacement l) {
  return l == LayerPlacement::row ? Placement::S(kFeature) : Placement::B();
}
// A gradient's placement is its value's dual (DESIGN.md): a whole value's
// gradient is partial, a partial value's whole, a split one's split alike.
Placement gradient_of(Placement p) {
  if (p.is_partial()) return Placement::B();
  if (p.is_split()) return p;
  return Placement::P();
}

// What the resharding rule runs to take `bytes` from `from` to `to` over
// tp ranks. A gradient may stay partial (it is summed where it is read
// whole), so nothing makes one partial.
double reshard_seconds(const CostEstimator& estimator, Placement from, Placement to, double bytes, int tp,
                       LinkClass link, int per_node) {
  if (to.is_partial()) return 0;
  const std::optional<comm::Collective> kind = parallel::collective_of(parallel::resharding(from, to));
  return kind ? estimator.collective_seconds(*kind, bytes, tp, link, per_node) : 0.0;
}

}  // namespace

double exchange_seconds(const CostEstimator& estimator, LayerPlacement from, LayerPlacement to, double bytes, int tp,
                        LinkClass link, int per_node) {
  if (tp <= 1) return 0;
  const Placement given = output_of(from), taken = input_of(to);
  return reshard_seconds(estimator, given, taken, bytes, tp, link, per_node) +
         reshard_seconds(estimator, gradient_of(taken), gradient_of(given), bytes, tp, link, per_node);
}

}  // namespace px::plan
