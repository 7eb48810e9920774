// Import of an ONNX model (a forward graph and its weights, as
// torch.onnx.export writes it) into a parallax Model: initializers become
// parameters under their ONNX names with their values, graph inputs become
// batch inputs bound to a dataset, and the loss is the graph's scalar output
// or one attached to its first output. Autodiff then differentiates it like
// a built-in model. docs/onnx.md lists the operators and binding rules.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nn/model.h"

namespace px::nn {

// What a graph input is fed from: the datasets parallax has.
//   images:  Fashion-MNIST images, f32 (N, 1, 28, 28) (or (N, 784) inputs)
//   tokens:  byte-level text windows, int (N, T)
//   labels:  class labels, int (N)
//   targets: next tokens, int (N, T); or, a float input (mse's target),
//            the images again, as that input's shape views them
enum class InputRole { images, tokens, labels, targets };

struct InputBinding {
  std::string input;  // the ONNX graph input's name
  InputRole role = InputRole::images;
  bool operator==(const InputBinding&) const = default;
};

struct OnnxConfig {
  std::string path;                   // the .onnx file
  std::string loss;                   // "" (the graph's scalar output, else cross_entropy) | cross_entropy | mse
  std::vector<InputBinding> bindings; // --input NAME=ROLE; inputs not named bind by shape and dtype
  // The length a symbolic sequence dim of a tokens or targets input (int
  // [N,T], exported with dynamic_axes on T) is bound to; 0: the rows of
  // the model's position table (GPT's block size). A fixed T must equal it.
  int64_t sequence = 0;
  bool operator==(const OnnxConfig&) const = default;
};

// Does `model` (a --model value) name an ONNX file? (It ends in ".onnx".)
bool is_onnx_path(const std::string& model);
// "images" <-> InputRole::images, ...; px::Error names an unknown role.
InputRole input_role(const std::string& name);
const char* input_role_name(InputRole role);
// "NAME=ROLE" as --input takes it; px::Error names a malformed one.
InputBinding parse_input_binding(const std::string& text);

// The model in `config.path` for a batch of `batch` rows: symbolic batch
// dims bound to `batch`, a symbolic sequence dim to `config.sequence` (or
// the position table's rows), Shape-derived constants (positions and
// causal masks from the input's length too) folded, dropout kept only
// when `training`. px::Error, one line naming the file and what is wrong: a
// truncated or corrupt file, a graph the ONNX checker rejects, an opset
// outside 13..17, an initializer whose data disagrees with its shape, an
// unsupported operator (its type, node name and the supported set), an
// input no dataset fits, a loss that cannot be attached.
Model import_onnx(const OnnxConfig& config, int64_t batch, bool training);

// Writes `model_path`'s graph to `out_path` (atomically) with every
// initializer parallax trained set to `parameters` (by ONNX name): what a
// framework loads back. px::Error names a parameter the model does not
// hold or holds with another shape.
void export_onnx(const std::string& model_path, const std::map<std::string, Tensor>& parameters,
                 const std::string& out_path);

// Every operator type the importer accepts, sorted (none without ONNX).
std::vector<std::string> onnx_supported_operators();

// Was this build configured with ONNX (-DPX_ONNX=ON, the default)? Without
// it import_onnx and export_onnx fail as require_onnx does; the
// configuration and binding parsers above work either way.
bool onnx_available();

// Nothing with ONNX; without it a px::Error naming `what` (e.g. "model
// 'x.onnx'") and how to build with ONNX.
void require_onnx(const std::string& what);

}  // namespace px::nn
