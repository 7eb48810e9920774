// The GPT-2 transformer block, shared by the training graph (gpt.cc) and
// the decode graph (gpt_decode.cc): the same parameter names, LayerNorms,
// projections and MLP, with the attention core (what turns the heads'
// q, k, v into their outputs) supplied by the caller. Internal to nn.
// Activations are (lead..., C): lead = (B, T) for training, (N) tokens for
// decoding.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "nn/gpt.h"
#include "nn/model.h"

namespace px::nn::detail {

struct GptBlocks {
  const GptConfig& config;
  Graph& g;
  std::vector<int64_t> lead;  // the activations' leading dims (-1 allowed for the first)
  // Tokens the graph routes at once (B*T for training, N for decoding): the
  // routers' loss and load scales are over them.
  int64_t tokens = 0;
  bool training = false;      // dropout, the routers' losses, capacity (decoding is dropless)
  // qkv (lead..., 3, H, D) of layer `layer` -> (lead..., H, D).
  std::function<ValueId(ValueId qkv, int64_t layer)> attend;
  int64_t salt = 0;
  std::vector<RouterValues> routers;  // filled by the mixture-of-experts layers

  ValueId dropout(ValueId x, const std::string& name);
  ValueId attention(ValueId x, int64_t layer);  // (lead..., C) -> (lead..., C)
  ValueId mlp(ValueId x);
  ValueId mixture_of_experts(ValueId x, int64_t layer);  // (lead..., C) -> (lead..., C)
  ValueId block(ValueId x, int64_t layer);  // "h.{layer}": pre-LayerNorm attention and MLP with residuals
};

}  // namespace px::nn::detail
