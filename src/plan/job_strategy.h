// A job's strategy from its parts, without the runtime: what `parallax
// lower`, `simulate` and `plan` build (and the trainer too) from a model
// config and a parallel::StrategyRequest. This library links no runtime
// room (the test PlanLinksNoRuntime proves it).
#pragma once

#include "nn/build_model.h"
#include "parallel/compose.h"
#include "parallel/lower.h"

namespace px::plan {

// The rules between a model, a batch of `batch` rows on `ranks` ranks and
// the split a request asks of them, checked before any graph is built:
// the mesh {pp, dp, cp, tp} divides the ranks and gives every data rank a
// row, tensor parallelism computes whole attention heads, sequence
// parallelism needs a sequence (px::Error naming the flag). How the parts
// combine among themselves is parallel::compose's.
void validate_split(const nn::ModelConfig& model, const parallel::StrategyRequest& request, int ranks,
                    int64_t batch);

// How the run uses its strategy, where a combination rule depends on it.
struct RunUse {
  double grad_clip = 0;     // the run clips the global gradient norm to this (0: off)
  double sgd_momentum = 0;  // the run's SGD momentum (0: none, or another optimizer)
};

// The strategy `request` asks for `model` on `ranks` ranks, or the one its
// --strategy file names (its mesh must have `ranks` ranks), validated.
parallel::Strategy strategy_for(const parallel::StrategyRequest& request, const nn::Model& model, int ranks,
                                RunUse use = {});

// What `model` lowers with under `request`: its collective algorithm and
// bucket buffers shape the Program (wire bytes, back-pressure edges).
parallel::LowerRequest lower_request(const nn::Model& model, const parallel::StrategyRequest& request);
// The model's values a training step reports (LowerRequest::reported): per
// mixture-of-experts layer its statistics (nn::RouterValues::stats).
std::vector<ValueId> reported_values(const nn::Model& model);

}  // namespace px::plan
