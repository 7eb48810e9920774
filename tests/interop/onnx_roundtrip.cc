// px_interop_onnx_roundtrip: imports an ONNX fixture, trains it 200 AdamW
// steps on the fixture's batch, exports the trained model as ONNX and
// writes the loss parallax computes with the trained parameters on that
// batch, for check_onnx_export.py to reproduce in PyTorch from the
// exported file.
//
//   px_interop_onnx_roundtrip FIXTURE.onnx FIXTURE.reference.safetensors OUT_DIR
//
// OUT_DIR/trained.onnx  the original graph with the trained initializers
// OUT_DIR/loss.txt      the mean loss on the fixture's batch after training
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "core/error.h"
#include "graph/executor.h"
#include "nn/onnx/onnx_import.h"
#include "parallel/compose.h"
#include "parallel/lower.h"
#include "parallel/strategy.h"
#include "runtime/state/safetensors.h"
#include "runtime/executor/program_executor.h"
#include "runtime/tasks/task.h"

constexpr uint64_t kSteps = 200;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: px_interop_onnx_roundtrip FIXTURE.onnx FIXTURE.reference.safetensors OUT_DIR\n");
    return 2;
  }
  try {
    const std::string model_path = argv[1], out = argv[3];
    const px::SafetensorsFile batch = px::load_safetensors(argv[2]);
    const px::Tensor& inputs = batch.at("inputs");
    const px::Tensor& targets = batch.at("targets");
    const px::nn::Model model = px::nn::import_onnx({.path = model_path}, inputs.dim(0), true);
    const px::parallel::Strategy strategy = px::parallel::data_parallel(1, batch_input_names(model));
    px::ProgramExecutor executor(px::parallel::lower({.forward = &model.graph, .loss = model.loss}, strategy, 0),
                                 px::AxisGroups{}, {.kind = "adamw", .weight_decay = 0.01});
    executor.set_parameters(px::initial_parameters(model.graph, 0));
    for (uint64_t step = 0; step < kSteps; ++step)
      executor.run({.feeds = {{model.inputs, inputs}, {model.targets, targets}}, .step = step, .lr = 3e-4});
    const px::ParamStore trained = executor.parameters();
    std::map<std::string, px::Tensor> parameters;
    for (const auto& [name, tensor] : trained.named()) parameters.emplace(name, tensor);
    std::filesystem::create_directories(out);
    px::nn::export_onnx(model_path, parameters, out + "/trained.onnx");
    // The trained model's loss on the batch, from a fresh import of the export.
    const px::nn::Model back = px::nn::import_onnx({.path = out + "/trained.onnx"}, inputs.dim(0), false);
    std::vector<px::Tensor> bound;
    px::initial_parameters(back.graph, 0).bind(back.graph, bound);
    bound[back.inputs] = inputs;
    bound[back.targets] = targets;
    px::Executor forward(back.graph, {back.loss});
    const double loss = forward.run(bound).front().f32()[0];
    std::ofstream(out + "/loss.txt") << fmt::format("{:.9g}\n", loss);
    std::printf("trained %d steps, exported %s/trained.onnx, loss %.9g\n", static_cast<int>(kSteps), out.c_str(), loss);
  } catch (const px::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
