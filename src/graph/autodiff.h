// Reverse-mode automatic differentiation over a Graph: appends the backward
// nodes (each op's backward rule) that compute d(loss)/d(value) for the
// requested values, summing contributions where a value is used more than
// once (a tied embedding gets add(d_head, d_lookup)).
#pragma once

#include <map>
#include <vector>

#include "graph/graph.h"

namespace px {

struct Gradients {
  std::map<ValueId, ValueId> of;  // value -> its gradient value
  // Throws px::Error if `value` got no gradient (it does not affect the loss).
  ValueId at(ValueId value) const;
};

// `loss` must be a scalar (shape []). Returns gradients for every value in
// `wrt` that the loss depends on.
Gradients build_backward(Graph& graph, ValueId loss, const std::vector<ValueId>& wrt);

}  // namespace px
