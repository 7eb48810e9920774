// GPT in the GPT-2 layout: learned token (wte) and position (wpe)
// embeddings, n_layer pre-LayerNorm blocks of causal self-attention and a 4x
// GELU MLP, a final LayerNorm, and an LM head tied to wte.
// Parameter names and layouts follow GPT-2 checkpoints (Conv1D: (in, out)):
//   wte.weight (V, C)  wpe.weight (block, C)
//   h.{i}.ln_1.{weight,bias} (C)       h.{i}.attn.c_attn.weight (C, 3C)  .bias (3C)
//   h.{i}.attn.c_proj.weight (C, C)    h.{i}.ln_2.{weight,bias} (C)
//   h.{i}.mlp.c_fc.weight (C, 4C)      h.{i}.mlp.c_proj.weight (4C, C)   ln_f.{weight,bias} (C)
// Initialization as GPT-2: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)).
// A mixture of experts (moe_experts E > 0) replaces the MLP of every
// moe_every-th block (i % moe_every == moe_every - 1) by a router and E
// expert MLPs of width F (docs/moe.md):
//   h.{i}.mlp.router.weight (C, E)            .bias (E) when balanced by bias
//   h.{i}.mlp.experts.c_fc.weight (E, C, F)    .bias (E, F)
//   h.{i}.mlp.experts.c_proj.weight (E, F, C)  .bias (E, C)
#pragma once

#include <cstdint>
#include <string>

#include "nn/model.h"

namespace px::nn {

struct GptConfig {
  int64_t vocab = 256;
  int64_t block = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  // Mixture of experts: 0 experts is the dense GPT.
  int64_t moe_experts = 0;
  int64_t moe_top_k = 2;         // experts per token
  int64_t moe_every = 1;         // every n-th block's MLP is a mixture
  int64_t moe_width = 0;         // each expert's hidden width; 0: 4C / k (the dense MLP's active FLOPs)
  double capacity_factor = 0.0;  // 0: dropless; else each expert takes at most f * tokens * k / E copies
  // How the load is balanced: "aux" (Switch's loss, aux_loss_coef) or
  // "bias" (DeepSeek-V3: a per-expert bias steering the choice, no loss).
  std::string moe_balance = "aux";
  double moe_bias_rate = 1e-3;   // balance "bias": how far a step moves each expert's bias (DeepSeek-V3's gamma)
  double aux_loss_coef = 0.01;   // Switch's load-balancing loss (balance "aux")
  double z_loss_coef = 0.001;    // ST-MoE's router z-loss
  bool operator==(const GptConfig&) const = default;
};

// Whether block `layer`'s MLP is a mixture of experts, and its experts' width.
bool is_moe_layer(const GptConfig& config, int64_t layer);
int64_t expert_width(const GptConfig& config);
// Parameters of the model (every expert counted), and those one token
// passes through (k experts per mixture): the active ones.
int64_t parameter_count(const GptConfig& config);
int64_t active_parameter_count(const GptConfig& config);

// Throws px::Error for impossible configs (n_embd not divisible by n_head, ...).
void validate(const GptConfig& config);
// batch B sequences of length T <= block. `training` enables dropout. The
// graph's inputs are tokens and targets (B, T); positions 0..T-1 come from
// an `arange` node inside it.
Model build_gpt(const GptConfig& config, int64_t batch, int64_t seq_len, bool training);

}  // namespace px::nn
