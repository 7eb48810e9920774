#include "nn/gpt_blocks.h"

#include <cmath>

#include "nn/layers.h"

namespace px::nn::detail {

ValueId GptBlocks::dropout(ValueId x, const std::string& name) {
  if (!training || config.dropout == 0) return x;
  return g.add1("dropout", {x}, {{"p", config.dropout}, {"salt", salt++}}, name);
}

ValueId GptBlocks::attention(ValueId x, int64_t layer) {
  Scope scope(g, "attn");
  const int64_t C = config.n_embd, H = config.n_head, D = C / H;
  std::vector<int64_t> heads = lead, merged = lead;
  heads.insert(heads.end(), {3, H, D});
  merged.push_back(C);
  ValueId qkv = gpt_linear(g, "c_attn", x, C, 3 * C, 0.02);  // (lead..., 3C)
  qkv = g.add1("reshape", {qkv}, {{"shape", heads}}, "split_heads");
  ValueId y = attend(qkv, layer);  // (lead..., H, D)
  y = g.add1("reshape", {y}, {{"shape", merged}}, "merge_heads");
  y = gpt_linear(g, "c_proj", y, C, C, 0.02 / std::sqrt(2.0 * config.n_layer));
  return dropout(y, "resid_dropout");
}

ValueId GptBlocks::mlp(ValueId x) {
  Scope scope(g, "mlp");
  const int64_t C = config.n_embd;
  ValueId h = g.add1("gelu", {gpt_linear(g, "c_fc", x, C, 4 * C, 0.02)}, {}, "gelu");  // (lead..., 4C)
  h = gpt_linear(g, "c_proj", h, 4 * C, C, 0.02 / std::sqrt(2.0 * config.n_layer));
  return dropout(h, "dropout");
}

ValueId GptBlocks::block(ValueId x, int64_t layer) {
  Scope scope(g, fmt::format("h.{}", layer));
  x = g.add1("add", {x, attention(layer_norm(g, "ln_1", x, config.n_embd), layer)}, {}, "residual_1");
  return g.add1("add", {x, mlp(layer_norm(g, "ln_2", x, config.n_embd))}, {}, "residual_2");
}

}  // namespace px::nn::detail
