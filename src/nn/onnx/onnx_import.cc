#include "nn/onnx/onnx_import.h"

#include <algorithm>

#include "core/error.h"
#include "nn/onnx/binding.h"
#include "nn/onnx/convert.h"
#include "nn/onnx/fold.h"
#include "nn/onnx/load.h"

namespace px::nn {

bool onnx_available() { return true; }

void require_onnx(const std::string&) {}

std::vector<std::string> onnx_supported_operators() {
  std::vector<std::string> names = converted_operators();
  for (const std::string& name : foldable_operators())
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

Model import_onnx(const OnnxConfig& config, int64_t batch, bool training) {
  if (batch <= 0) fail("onnx: batch {} must be positive", batch);
  const ::onnx::ModelProto proto = load_onnx(config.path);
  Model model;
  try {
    ImportContext context(model.graph, proto.graph(), batch, training);
    const BoundInputs bound = bind_inputs(context, proto.graph(), config, model);
    // Nodes come in topological order (the checker enforces it).
    for (const auto& node : proto.graph().node()) {
      if (node.op_type() == "Identity" && context.is_initializer(ImportContext::input(node, 0))) {
        context.alias_initializer(node.output(0), node.input(0));
        continue;
      }
      if (auto folded = try_fold(context, node)) {
        for (int i = 0; i < node.output_size() && i < static_cast<int>(folded->size()); ++i)
          context.define_constant(node.output(i), std::move((*folded)[static_cast<size_t>(i)]));
        continue;
      }
      convert_node(context, node);
    }
    bind_loss(context, proto.graph(), config, model, bound);
  } catch (const Error& e) {
    fail("onnx: '{}': {}", config.path, e.what());
  }
  return model;
}

}  // namespace px::nn
