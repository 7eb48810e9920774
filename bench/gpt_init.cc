// px_bench_gpt_init: writes the GPT weights `parallax train --seed S` starts
// from (ParamStore::initialize over the model graph, as the trainer does) to a
// safetensors file, so bench/compare_gpt_loss.py can start PyTorch from the
// very same initial weights.
//
//   px_bench_gpt_init --out FILE [--vocab 256] [--block 128] [--layers 4]
//                     [--heads 4] [--embd 128] [--seed 1]
#include <cstdio>
#include <string>

#include "core/error.h"
#include "nn/gpt.h"
#include "runtime/state/param_store.h"
#include "runtime/state/safetensors.h"

int main(int argc, char** argv) {
  px::nn::GptConfig config;
  uint64_t seed = 1;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::printf("usage: px_bench_gpt_init --out FILE [--vocab 256] [--block 128] [--layers 4] [--heads 4] "
                  "[--embd 128] [--seed 1]\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", k.c_str());
      return 2;
    }
    std::string v = argv[++i];
    try {
      if (k == "--out") out = v;
      else if (k == "--vocab") config.vocab = std::stoll(v);
      else if (k == "--block") config.block = std::stoll(v);
      else if (k == "--layers") config.n_layer = std::stoll(v);
      else if (k == "--heads") config.n_head = std::stoll(v);
      else if (k == "--embd") config.n_embd = std::stoll(v);
      else if (k == "--seed") seed = std::stoull(v);
      else {
        std::fprintf(stderr, "error: unknown option %s\n", k.c_str());
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "error: %s '%s' is not a number\n", k.c_str(), v.c_str());
      return 2;
    }
  }
  if (out.empty()) {
    std::fprintf(stderr, "error: --out FILE is required\n");
    return 2;
  }
  try {
    // The trainer initializes from a batch-1 evaluation graph; parameters
    // and their draw order do not depend on the batch or on training mode.
    px::nn::Model model = px::nn::build_gpt(config, 1, config.block, /*training=*/false);
    px::ParamStore params = px::ParamStore::initialize(model.graph, seed);
    px::save_safetensors(out, params.named(), {{"seed", std::to_string(seed)}});
  } catch (const px::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
