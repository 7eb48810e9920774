#include "nn/gpt.h"

#include "nn/gpt_blocks.h"
#include "nn/layers.h"

namespace px::nn {

void validate(const GptConfig& c) {
  auto positive = [](const char* what, int64_t v) {
    if (v <= 0) fail("gpt: {}={} must be positive", what, v);
  };
  positive("vocab", c.vocab);
  positive("block", c.block);
  positive("n_layer", c.n_layer);
  positive("n_head", c.n_head);
  positive("n_embd", c.n_embd);
  if (c.n_embd % c.n_head != 0)
    fail("gpt: n_embd={} is not divisible by n_head={} (each head gets n_embd/n_head channels)", c.n_embd,
         c.n_head);
  if (!(c.dropout >= 0 && c.dropout < 1)) fail("gpt: dropout={} must be in [0, 1)", c.dropout);
}

Model build_gpt(const GptConfig& c, int64_t batch, int64_t T, bool training) {
  validate(c);
  if (T <= 0 || T > c.block) fail("gpt: sequence length {} must be in [1, block={}]", T, c.block);
  if (batch <= 0) fail("gpt: batch {} must be positive", batch);
  Model m;
  Graph& g = m.graph;
  detail::GptBlocks b{.config = c,
                     .g = g,
                     .lead = {-1, T},
                     .training = training,
                     .attend = [&g](ValueId qkv, int64_t) { return g.add1("attention", {qkv}, {}, "attention"); }};
  m.inputs = g.input("tokens", {Shape{batch, T}, DType::i32});   // (B, T)
  m.targets = g.input("targets", {Shape{batch, T}, DType::i32}); // (B, T)
  ValueId wte = g.param("wte.weight", {Shape{c.vocab, c.n_embd}}, {ParamInit::Kind::normal, 0.02}, true);
  ValueId wpe = g.param("wpe.weight", {Shape{c.block, c.n_embd}}, {ParamInit::Kind::normal, 0.02}, true);
  ValueId tok = g.add1("embedding", {m.inputs, wte}, {}, "wte");      // (B, T, C)
  ValueId positions = g.add1("arange", {}, {{"n", T}}, "positions");  // (T): 0..T-1
  ValueId pos = g.add1("embedding", {positions, wpe}, {}, "wpe");     // (T, C)
  ValueId x = b.dropout(g.add1("broadcast_add", {tok, pos}, {}, "embed"), "embed_dropout");
  for (int64_t i = 0; i < c.n_layer; ++i) x = b.block(x, i);
  x = layer_norm(g, "ln_f", x, c.n_embd);
  m.logits = g.add1("matmul", {x, wte}, {{"trans_b", int64_t{1}}}, "lm_head");  // (B, T, V)
  // The loss in parts (graph/ops/cross_entropy_parts.cc), so that logits
  // split along the vocabulary are never gathered: three row reductions.
  ValueId shift = g.add1("logits_max", {m.logits}, {}, "loss.max");                    // (B, T)
  ValueId sum_exp = g.add1("logits_sum_exp", {m.logits, shift}, {}, "loss.sum_exp");   // (B, T)
  ValueId target = g.add1("target_logit", {m.logits, m.targets}, {}, "loss.target");  // (B, T)
  m.loss = g.add1("cross_entropy_loss", {shift, sum_exp, target},
                  {{"scale", 1.0 / static_cast<double>(batch * T)}}, "loss");
  return m;
}

}  // namespace px::nn
