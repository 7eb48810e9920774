// Shared pieces of the generic op harnesses: random inputs for an op's
// examples, slicing/concatenating tensors along any dim, and running one op.
#pragma once

#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "graph/op.h"

namespace px::testing {

// Random tensors for an example: floats ~ N(0, 1), integers uniform in [0, int_upper).
std::vector<Tensor> random_inputs(const OpExample& example, Rng& rng);
// Rows [lo, hi) of `t` along `dim`, as a new contiguous tensor.
Tensor slice_dim(const Tensor& t, int dim, int64_t lo, int64_t hi);
// Concatenation along `dim`.
Tensor concat_dim(const std::vector<Tensor>& parts, int dim);
// Runs `def` once on `inputs`, allocating outputs from its shape rule.
std::vector<Tensor> run_op(const OpDef& def, const Attrs& attrs, const std::vector<Tensor>& inputs,
                           const OpContext& context = {});
// max |a - b| / (1 + |b|) over elements (any dtype, compared as double).
double max_relative_diff(const Tensor& a, const Tensor& b);

}  // namespace px::testing
