// GPT in the GPT-2 layout: learned token (wte) and position (wpe)
// embeddings, n_layer pre-LayerNorm blocks of causal self-attention and a 4x
// GELU MLP, a final LayerNorm, and an LM head tied to wte.
// Parameter names and layouts follow GPT-2 checkpoints (Conv1D: (in, out)):
//   wte.weight (V, C)  wpe.weight (block, C)
//   h.{i}.ln_1.{weight,bias} (C)       h.{i}.attn.c_attn.weight (C, 3C)  .bias (3C)
//   h.{i}.attn.c_proj.weight (C, C)    h.{i}.ln_2.{weight,bias} (C)
//   h.{i}.mlp.c_fc.weight (C, 4C)      h.{i}.mlp.c_proj.weight (4C, C)   ln_f.{weight,bias} (C)
// Initialization as GPT-2: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)).
#pragma once

#include <cstdint>

#include "nn/model.h"

namespace px::nn {

struct GptConfig {
  int64_t vocab = 256;
  int64_t block = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  bool operator==(const GptConfig&) const = default;
};

// Throws px::Error for impossible configs (n_embd not divisible by n_head, ...).
void validate(const GptConfig& config);
// batch B sequences of length T <= block. `training` enables dropout. The
// graph's inputs are tokens and targets (B, T); positions 0..T-1 come from
// an `arange` node inside it.
Model build_gpt(const GptConfig& config, int64_t batch, int64_t seq_len, bool training);

}  // namespace px::nn
