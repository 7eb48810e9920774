// px_interop_gpt_export: writes a parallax GPT checkpoint and the logits
// parallax computes with it, for check_gpt_logits.py to compare with PyTorch.
//
//   px_interop_gpt_export OUT_DIR
//
// OUT_DIR/model.safetensors  the parameters, GPT-2 names and layouts
// OUT_DIR/logits.safetensors tokens (B, T) i32, targets (B, T) i32,
//                            logits (B, T, V) f32, loss (1) f32
// metadata of logits.safetensors: the GptConfig (vocab, block, n_layer,
// n_head, n_embd). The config is small and odd-sized, T < block, and every
// parameter (layer-norm gains and biases too) is redrawn far from GPT-2's
// near-zero init, so a wrong layout or a missed transpose changes the logits
// by far more than the 1e-4 the check allows.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "parallel/lower.h"
#include "runtime/executor/program_executor.h"
#include "runtime/tasks/task.h"
#include "runtime/state/param_store.h"
#include "runtime/state/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: px_interop_gpt_export OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    std::filesystem::create_directories(dir);
    const px::nn::GptConfig config{.vocab = 67, .block = 16, .n_layer = 2, .n_head = 3, .n_embd = 48};
    const int64_t B = 3, T = 13;
    px::nn::Model model = px::nn::build_gpt(config, B, T, /*training=*/false);
    px::ParamStore params = px::ParamStore::initialize(model.graph, 7);
    px::Rng rng(11);
    for (const std::string& name : params.names()) {
      px::Tensor& t = params.at(name);
      const bool gain = name.find("ln_") != std::string::npos && name.ends_with(".weight");
      for (float& v : t.span<float>()) v = static_cast<float>((gain ? 1.0 : 0.0) + 0.3 * rng.normal());
    }
    std::vector<int32_t> tokens, targets;
    for (int64_t i = 0; i < B * T; ++i) {
      tokens.push_back(static_cast<int32_t>(rng.below(config.vocab)));
      targets.push_back(static_cast<int32_t>(rng.below(config.vocab)));
    }
    px::Tensor x = px::Tensor::from_vector({B, T}, tokens), y = px::Tensor::from_vector({B, T}, targets);
    px::ProgramExecutor forward(
        px::parallel::lower_single(model.graph, model.loss, {model.logits}, px::nn::batch_input_names(model), false),
        px::AxisGroups{});
    forward.use_parameters(params);
    px::StepResult out = forward.run({.feeds = px::feeds_of(model, {x, y})});
    const px::Tensor logits = out.outputs.front().front();
    const float loss = static_cast<float>(out.loss);
    px::save_safetensors(dir + "/model.safetensors", params.named());
    px::save_safetensors(dir + "/logits.safetensors",
                         {{"tokens", x}, {"targets", y}, {"logits", logits},
                          {"loss", px::Tensor::from_vector({1}, std::vector<float>{loss})}},
                         {{"vocab", std::to_string(config.vocab)},
                          {"block", std::to_string(config.block)},
                          {"n_layer", std::to_string(config.n_layer)},
                          {"n_head", std::to_string(config.n_head)},
                          {"n_embd", std::to_string(config.n_embd)}});
  } catch (const px::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
