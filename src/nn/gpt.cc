#include "nn/gpt.h"

#include <algorithm>

#include "nn/gpt_blocks.h"
#include "nn/layers.h"

namespace px::nn {

namespace {

void validate_mixture(const GptConfig& c) {
  if (c.moe_experts < 0) fail("gpt: moe_experts={} must be >= 0 (0: a dense MLP)", c.moe_experts);
  if (c.moe_top_k < 1 || c.moe_top_k > c.moe_experts)
    fail("gpt: moe_top_k={} must be in [1, moe_experts={}]", c.moe_top_k, c.moe_experts);
  if (c.moe_every < 1) fail("gpt: moe_every={} must be positive", c.moe_every);
  if (c.moe_every > c.n_layer)
    fail("gpt: moe_every={} leaves none of the {} blocks a mixture of experts (block i is one when i % {} == {})",
         c.moe_every, c.n_layer, c.moe_every, c.moe_every - 1);
  if (c.moe_width < 0) fail("gpt: moe_width={} must be >= 0 (0: 4 * n_embd / moe_top_k)", c.moe_width);
  if (expert_width(c) < 1)
    fail("gpt: an expert's width 4 * n_embd / moe_top_k = {} is empty; give --moe-width", expert_width(c));
  if (!(c.capacity_factor >= 0)) fail("gpt: capacity_factor={} must be >= 0 (0: dropless)", c.capacity_factor);
  if (!(c.aux_loss_coef >= 0)) fail("gpt: aux_loss_coef={} must be >= 0", c.aux_loss_coef);
  if (c.moe_balance != "aux" && c.moe_balance != "bias")
    fail("gpt: moe_balance='{}' must be aux (Switch's loss) or bias (a per-expert bias, DeepSeek-V3)", c.moe_balance);
  if (!(c.moe_bias_rate > 0)) fail("gpt: moe_bias_rate={} must be positive", c.moe_bias_rate);
  if (!(c.z_loss_coef >= 0)) fail("gpt: z_loss_coef={} must be >= 0", c.z_loss_coef);
}

}  // namespace

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
  if (c.moe_experts != 0) validate_mixture(c);
  parameter_count(c);  // names a model too large to count
}

bool is_moe_layer(const GptConfig& c, int64_t layer) {
  return c.moe_experts > 0 && layer % c.moe_every == c.moe_every - 1;
}

int64_t expert_width(const GptConfig& c) {
  return c.moe_width > 0 ? c.moe_width : 4 * c.n_embd / std::max<int64_t>(c.moe_top_k, 1);
}

namespace {

// Parameters with `experts_counted` experts per mixture.
// Counted in double, in closed form: a config from the command line may
// ask for 10^15 blocks, which must be named (below), not looped over or
// overflowed.
double parameters_with(const GptConfig& c, int64_t experts_counted) {
  const double C = static_cast<double>(c.n_embd), F = static_cast<double>(expert_width(c));
  const double attention = 3 * C * C + 3 * C + C * C + C, norms = 4 * C;
  const double dense_mlp = 4 * C * C + 4 * C + 4 * C * C + C;
  const double router = (C + (c.moe_balance == "bias" ? 1 : 0)) * static_cast<double>(c.moe_experts);
  const double mixture = router + static_cast<double>(experts_counted) * (C * F + F + F * C + C);
  // Block i is a mixture when i % every == every - 1: every `every`-th one.
  const int64_t mixtures = c.moe_experts > 0 && c.moe_every > 0 ? c.n_layer / c.moe_every : 0;
  const auto dense = static_cast<double>(c.n_layer - mixtures);
  return (static_cast<double>(c.vocab) + static_cast<double>(c.block)) * C + 2 * C +
         static_cast<double>(c.n_layer) * (attention + norms) + dense * dense_mlp +
         static_cast<double>(mixtures) * mixture;
}

// Past 2^53 a double no longer counts parameters one by one, and a tensor
// of that many elements is beyond any machine.
constexpr double kMaxParameters = 9007199254740992.0;

int64_t counted(const GptConfig& c, int64_t experts_counted) {
  const double n = parameters_with(c, experts_counted);
  if (!(n <= kMaxParameters))
    fail("gpt: {} blocks of width {} (vocab {}, block {}) make {:.3g} parameters; expected at most 2^53 = {:.3g}",
         c.n_layer, c.n_embd, c.vocab, c.block, n, kMaxParameters);
  return static_cast<int64_t>(n);
}

}  // namespace

int64_t parameter_count(const GptConfig& c) { return counted(c, c.moe_experts); }
int64_t active_parameter_count(const GptConfig& c) {
  return counted(c, c.moe_experts > 0 ? c.moe_top_k : 0);
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
                     .tokens = batch * T,
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
  // Training adds the routers' balancing losses to the objective (the
  // loss a training step reports); evaluation's loss is the language
  // model's alone, comparable with a dense model's.
  for (const RouterValues& r : b.routers)
    for (ValueId extra : {r.aux_loss, r.z_loss, r.balance})
      if (extra != kNoValue) m.loss = g.add1("add", {m.loss, extra}, {}, g.value(extra).name + ".add");
  m.routers = std::move(b.routers);
  return m;
}

}  // namespace px::nn
