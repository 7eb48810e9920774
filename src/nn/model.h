// A built model: its graph and the values the runtime feeds and reads.
// Builders (mlp.h, cnn.h, gpt.h) make one per batch shape; parameters are
// matched across graphs by name, so a training graph and an evaluation graph
// of another batch size share the same ParamStore.
#pragma once

#include <string>

#include "graph/graph.h"

namespace px::nn {

struct Model {
  Graph graph;
  ValueId inputs = kNoValue;     // images (N, 1, 28, 28) f32 or tokens (B, T) i32
  ValueId targets = kNoValue;    // labels (N) or next tokens (B, T), i32
  ValueId logits = kNoValue;     // (N, classes) or (B, T, V)
  ValueId loss = kNoValue;       // [] mean cross-entropy over the batch
};

}  // namespace px::nn
