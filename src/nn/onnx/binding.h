// Binding an ONNX graph to parallax's data and loss (docs/onnx.md): graph
// inputs become batch inputs fed from a dataset (by --input NAME=ROLE, else
// by shape and dtype), and the Model's loss is the graph's scalar output or
// a cross-entropy or squared error attached to its first output.
#pragma once

#include <onnx/onnx_pb.h>

#include "nn/model.h"
#include "nn/onnx/import_context.h"
#include "nn/onnx/onnx_import.h"

namespace px::nn {

// What bind_inputs decided that bind_loss needs.
struct BoundInputs {
  // model.targets is parallax's own labels or targets input (the graph
  // reads none), declared for a loss attached later.
  bool attached_targets = false;
  // A float input taking the role targets (mse's regression target): the
  // images themselves, as the ONNX input's shape views them; else kNoValue.
  ValueId float_targets = kNoValue;
};

// Adds a graph input for every ONNX graph input that is not an
// initializer, shaped as its dataset serves it (images (N, 1, 28, 28) f32,
// viewed as (N, 784) when the model wants that; labels (N) and tokens or
// targets (N, T) i32, a symbolic T bound to config.sequence or else to the
// rows of the model's position table), and sets model.inputs and
// model.targets: the bound labels or targets input, else one of parallax's
// own for an attached loss ("labels" (N) or "targets" (N, T)). A float
// input bound as targets is no input of its own: it names the images the
// model input is fed. The ONNX inputs may be declared in any order, among
// initializers or not: the images or tokens input is added first, then
// labels and targets.
BoundInputs bind_inputs(ImportContext& context, const ::onnx::GraphProto& graph, const OnnxConfig& config,
                        Model& model);

// After the nodes: sets model.loss and model.logits (kNoValue for a
// regression, which has no class scores to rank).
void bind_loss(ImportContext& context, const ::onnx::GraphProto& graph, const OnnxConfig& config, Model& model,
               const BoundInputs& bound);

}  // namespace px::nn
