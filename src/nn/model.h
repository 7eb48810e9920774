// A built model: its graph and the values the runtime feeds and reads.
// Builders (mlp.h, cnn.h, gpt.h) make one per batch shape; parameters are
// matched across graphs by name, so a training graph and an evaluation graph
// of another batch size share the same ParamStore.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace px::nn {

// A mixture-of-experts layer's values a run reports (per step: each
// expert's share of the choices, the dropped share, the two losses). load,
// dropped and the losses are scaled by the whole batch, so a step's are
// the sums of its micro-batches'.
struct RouterValues {
  int64_t layer = 0;
  ValueId load = kNoValue;      // (E): each expert's fraction of the choices, before dropping
  ValueId choice = kNoValue;    // (B, T, k) i32: the experts chosen, -1-e where capacity dropped it
  ValueId dropped = kNoValue;   // []: the fraction of the choices a capacity dropped
  ValueId aux_loss = kNoValue;  // [] coef-scaled; kNoValue when not training or coef 0
  ValueId z_loss = kNoValue;    // [] likewise
  ValueId balance = kNoValue;   // [] balanced by bias: the term whose gradient moves the bias (moe_bias_balance)
  ValueId stats = kNoValue;     // when training: load (E), dropped, then aux_loss and z_loss where present
};

struct Model {
  Graph graph;
  ValueId inputs = kNoValue;     // images (N, 1, 28, 28) f32 or tokens (B, T) i32
  ValueId targets = kNoValue;    // labels (N) or next tokens (B, T), i32
  ValueId logits = kNoValue;     // (N, classes) or (B, T, V); kNoValue for a regression (ONNX --loss mse)
  ValueId loss = kNoValue;       // [] mean cross-entropy over the batch (or an imported model's own loss),
                                 // plus the routers' losses when training a mixture of experts
  std::vector<RouterValues> routers;  // one per mixture-of-experts layer
};

// The graph inputs a batch feeds, by name: what data-parallel strategies
// split along the batch.
inline std::vector<std::string> batch_input_names(const Model& model) {
  return {model.graph.value(model.inputs).name, model.graph.value(model.targets).name};
}

// Positions a row of the batch holds: T for a token model (its input is
// ids (B, T): a built-in or imported GPT), 1 for anything else. Throughput
// is counted in tokens (rows x T) or samples.
inline int64_t positions_per_row(const Model& model) {
  const TensorSpec& in = model.graph.spec(model.inputs);
  const bool ids = in.dtype == DType::i32 || in.dtype == DType::i64;
  return ids && in.shape.rank() == 2 ? in.shape[1] : 1;
}

}  // namespace px::nn
