// Binding an ONNX graph to parallax's data and loss (docs/onnx.md): graph
// inputs become batch inputs fed from a dataset (by --input NAME=ROLE, else
// by shape and dtype), and the Model's loss is the graph's scalar output or
// a cross-entropy attached to its first output.
#pragma once

#include <onnx/onnx_pb.h>

#include "nn/model.h"
#include "nn/onnx/import_context.h"
#include "nn/onnx/onnx_import.h"

namespace px::nn {

// Adds a graph input for every ONNX graph input that is not an
// initializer, shaped as its dataset serves it (images (N, 1, 28, 28) f32,
// viewed as (N, 784) when the model wants that; labels (N) and tokens or
// targets (N, T) i32), and sets model.inputs and model.targets: the bound
// labels or targets input, else one of parallax's own for an attached loss
// ("labels" (N) or "targets" (N, T); `attached_targets` set).
void bind_inputs(ImportContext& context, const ::onnx::GraphProto& graph, const OnnxConfig& config, Model& model,
                 bool& attached_targets);

// After the nodes: sets model.loss and model.logits.
void bind_loss(ImportContext& context, const ::onnx::GraphProto& graph, const OnnxConfig& config, Model& model,
               bool attached_targets);

}  // namespace px::nn
