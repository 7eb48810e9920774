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

// A token's k chosen experts, each a GELU MLP of width F, weighted by the
// router's gates; a copy capacity dropped adds nothing, so the token
// passes through the residual alone. Legend: k experts per token, E
// experts, F an expert's width.
ValueId GptBlocks::mixture_of_experts(ValueId x, int64_t layer) {
  Scope scope(g, "mlp");
  const int64_t C = config.n_embd, E = config.moe_experts, k = config.moe_top_k, F = expert_width(config);
  const double tokens_ = static_cast<double>(tokens);
  ValueId router = g.param(g.scoped("router.weight"), {Shape{C, E}}, {ParamInit::Kind::normal, 0.02}, false);
  ValueId logits = g.add1("moe_router", {x, router}, {}, "router");  // (lead..., E) fp32
  const double capacity = training ? config.capacity_factor : 0.0;
  const bool by_bias = config.moe_balance == "bias";
  std::vector<ValueId> route_inputs{logits};
  if (by_bias)  // moved by sign at the bias rate, not by the optimizer (moe_bias_balance below)
    route_inputs.push_back(
        g.param(g.scoped("router.bias"), {Shape{E}}, {ParamInit::Kind::zeros, 0}, false, config.moe_bias_rate));
  const std::vector<ValueId> route =
      g.add("moe_route", route_inputs,
            {{"k", k},
             {"normalize", int64_t{k > 1}},  // top-1 gates are the probability (Switch), else renormalised
             {"capacity_factor", capacity},
             {"load_scale", 1.0 / (tokens_ * double(k))}},
            "route");
  const ValueId gates = route[0], choice = route[1], load = route[2];  // (lead..., k), (lead..., k), (E)

  auto experts_param = [&](const std::string& name, Shape shape, ParamInit init, bool decay) {
    return g.param(g.scoped("experts." + name), {std::move(shape)}, init, decay);
  };
  const ValueId fc_w = experts_param("c_fc.weight", {E, C, F}, {ParamInit::Kind::normal, 0.02}, true);
  const ValueId fc_b = experts_param("c_fc.bias", {E, F}, {ParamInit::Kind::zeros, 0}, false);
  const ValueId proj_w = experts_param("c_proj.weight", {E, F, C},
                                       {ParamInit::Kind::normal, 0.02 / std::sqrt(2.0 * config.n_layer)}, true);
  const ValueId proj_b = experts_param("c_proj.bias", {E, C}, {ParamInit::Kind::zeros, 0}, false);

  ValueId h = g.add1("moe_expand", {x}, {{"k", k}}, "dispatch");                          // (lead..., k, C)
  h = g.add1("moe_linear", {h, fc_w, choice}, {}, "experts.c_fc");                         // (lead..., k, F)
  h = g.add1("gelu", {g.add1("moe_bias_add", {h, fc_b, choice}, {}, "experts.c_fc.add_bias")}, {}, "gelu");
  h = g.add1("moe_linear", {h, proj_w, choice}, {}, "experts.c_proj");                     // (lead..., k, C)
  h = g.add1("moe_bias_add", {h, proj_b, choice}, {}, "experts.c_proj.add_bias");
  h = g.add1("moe_combine", {h, gates}, {}, "combine");                                    // (lead..., C)

  RouterValues values{.layer = layer, .load = load, .choice = choice, .dropped = route[3]};
  if (training && by_bias)
    // Only the gradient's sign moves the bias: scaled by 2^-30 the term adds
    // nothing visible to the loss or the gradients' norm, and stays exact.
    values.balance = g.add1("moe_bias_balance", {route_inputs[1], choice}, {{"scale", std::ldexp(1.0, -30)}},
                            "bias_balance");
  if (training && !by_bias && config.aux_loss_coef > 0)
    values.aux_loss = g.add1("moe_aux_loss", {load, logits},
                             {{"scale", config.aux_loss_coef * double(E) / tokens_}}, "aux_loss");
  if (training && config.z_loss_coef > 0)
    values.z_loss = g.add1("moe_z_loss", {logits}, {{"scale", config.z_loss_coef / tokens_}}, "z_loss");
  // What a training step reports, in one vector so that a data-parallel
  // run reduces it in one collective: load (E), dropped, then the losses
  // the layer has.
  if (training) {
    std::vector<ValueId> parts{load};
    for (ValueId scalar : {route[3], values.aux_loss, values.z_loss})
      if (scalar != kNoValue)
        parts.push_back(g.add1("reshape", {scalar}, {{"shape", std::vector<int64_t>{1}}},
                               g.value(scalar).name + ".as_vector"));
    values.stats = g.add1("concat", parts, {{"dim", int64_t{0}}}, "stats");
  }
  routers.push_back(values);
  return dropout(h, "dropout");
}

ValueId GptBlocks::block(ValueId x, int64_t layer) {
  Scope scope(g, fmt::format("h.{}", layer));
  x = g.add1("add", {x, attention(layer_norm(g, "ln_1", x, config.n_embd), layer)}, {}, "residual_1");
  const ValueId normed = layer_norm(g, "ln_2", x, config.n_embd);
  return g.add1("add", {x, is_moe_layer(config, layer) ? mixture_of_experts(normed, layer) : mlp(normed)}, {},
                "residual_2");
}

}  // namespace px::nn::detail
