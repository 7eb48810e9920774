// Placement propagation along one mesh axis: given the placements of a
// graph's inputs and parameters, walk the nodes in order and give every
// output the placement of the op signature its inputs match. This is how a
// strategy that only says "split the batch, replicate the weights" decides
// that every weight gradient is P (a partial sum, to be reduced).
#pragma once

#include <vector>

#include "graph/graph.h"
#include "graph/placement.h"

namespace px::parallel {

struct Propagation {
  std::vector<Placement> of_value;         // by ValueId
  std::vector<PlacementSignature> of_node;  // by node index: the signature chosen
};

// `seeds[v]` must be set for every input and param (others are ignored).
// Throws px::Error naming the node, its op, its input placements and the
// signatures it offers when none matches (resharding between mismatched
// placements is inserted by later strategies, not guessed here).
Propagation propagate(const Graph& graph, const std::vector<Placement>& seeds);

}  // namespace px::parallel
