#include "plan/layer_placement.h"

#include <cstdio>

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

int fc_index(const std::string& name) {
  int index = 0;
  char next = 0;
  const int read = std::sscanf(name.c_str(), "fc%d%c", &index, &next);
  return read >= 1 && index > 0 && (read == 1 || next == '.') ? index : 0;
}

void seed_layer(parallel::Strategy& strategy, const std::string& layer, LayerPlacement placement) {
  auto seed = [&](const std::string& value, Placement p) { strategy.seeds.push_back({value, "tp", p}); };
  switch (placement) {
    case LayerPlacement::replicated: break;
    case LayerPlacement::column:
      seed(layer + ".weight", Placement::S(1));
      seed(layer + ".bias", Placement::S(0));
      break;
    case LayerPlacement::row: seed(layer + ".weight", Placement::S(0)); break;
    case LayerPlacement::pair:
      if (layer.ends_with(".attn")) {
        seed(layer + ".c_attn.weight", Placement::S(1, 3));
        seed(layer + ".c_attn.bias", Placement::S(0, 3));
      } else {
        seed(layer + ".c_fc.weight", Placement::S(1));
        seed(layer + ".c_fc.bias", Placement::S(0));
      }
      seed(layer + ".c_proj.weight", Placement::S(0));
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
