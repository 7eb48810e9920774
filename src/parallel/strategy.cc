#include "parallel/strategy.h"

#include <algorithm>

namespace px::parallel {

Strategy data_parallel(const Graph& graph, const std::vector<ValueId>& batch_inputs, int ranks,
                       GradientSyncOptions sync) {
  Strategy s;
  s.mesh = DeviceMesh::data_parallel(ranks);
  s.sync = sync;
  std::vector<Placement> seeds(graph.values().size(), Placement::B());
  for (ValueId v : batch_inputs) seeds[static_cast<size_t>(v)] = Placement::S(0);
  s.placement = propagate(graph, seeds);
  return s;
}

}  // namespace px::parallel
