// `parallax export`: a checkpoint of an imported ONNX model written back as
// ONNX — the original graph with the trained initializers (docs/onnx.md).
#include <iostream>

#include "cli/commands.h"
#include "nn/onnx/onnx_import.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/tasks/model_json.h"

namespace px::cli {

void add_export_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, onnx, model;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("export", "write a checkpoint of an imported ONNX model back as ONNX");
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint directory (of a --model FILE.onnx run)")->required();
  cmd->add_option("--onnx", o->onnx, "the ONNX file to write")->required();
  cmd->add_option("--model", o->model, "the ONNX file trained (default: the one the checkpoint names)");
  cmd->callback([o] {
    nn::ModelConfig model;
    DataOptions data;
    apply_model_json(read_checkpoint_state(o->checkpoint).config, model, data);
    if (!nn::is_onnx_path(model.kind))
      fail("checkpoint '{}' holds the built-in model '{}'; export writes models imported from ONNX", o->checkpoint,
           model.kind);
    const std::string source = o->model.empty() ? model.kind : o->model;
    std::map<std::string, Tensor> parameters;
    for (const auto& [name, tensor] : load_model_weights(o->checkpoint).tensors) parameters.emplace(name, tensor);
    nn::export_onnx(source, parameters, o->onnx);
    std::cout << fmt::format("wrote '{}': {} with {} trained parameters\n", o->onnx, source, parameters.size());
  });
}

}  // namespace px::cli
