// The two auxiliary losses of a mixture-of-experts router. Legend: L... the
// token dims, E experts.
//   moe_aux_loss: load (E), logits (L..., E) -> []  attrs: scale
//                 Switch's load-balancing loss E * sum_e f_e * P_e, with f_e
//                 = load_e / sum(load) the share of the choices expert e got
//                 (a constant) and P_e its mean router probability (the
//                 softmax of the logits): scale = coef * E / (global
//                 tokens), summed over this shard's tokens. The shares are
//                 normalised here, so a micro-batch's loss is its own
//                 Switch loss (its load counts its choices only), weighted
//                 by its tokens.
//   moe_z_loss:   logits (L..., E) -> []  attrs: scale
//                 ST-MoE's router z-loss: scale * sum over tokens of
//                 logsumexp(logits)^2, scale = coef / (global tokens).
// Both are sums over tokens, so a split of the tokens makes them partial
// (as the language model's loss is): data parallelism needs nothing more.
// load must be whole: under a split it is reduced from the router's partial
// counts first (the rule's allreduce), so f_e is the global batch's.
//   moe_bias_balance: bias (E), choice (L..., k) i32 -> []  attrs: scale
//                 DeepSeek-V3's balancing without an auxiliary loss: a
//                 per-expert bias added to the router's scores when it
//                 chooses (moe_route). This term, scale * sum_e bias_e *
//                 (E * n_e - n) with n_e the choices expert e got (before
//                 dropping) of n, has a gradient with respect to the bias
//                 (none elsewhere) whose sign says whether expert e got
//                 more than its even share: the bias moves against it by
//                 a fixed rate (graph/graph.h's Value::sign_rate). The
//                 counts are integers and scale a power of two, so the
//                 ranks' partial gradients sum exactly and every strategy
//                 sees the same signs (an expert at exactly its share: 0).
//   moe_bias_balance_grad: choice, dloss -> dbias (E)  attrs: scale, experts
//   moe_aux_loss_grad: load, logits, dloss -> dlogits (L..., E)
// Reading the logits, not the router's output, keeps the loss partial where
// the tokens are split even when a capacity makes the router run whole.
//   moe_z_loss_grad:   logits, dloss -> dlogits (L..., E)
#include "graph/ops/op_util.h"
#include "kernels/moe.h"

namespace px::ops {
namespace {

void require_scalar(const TensorSpec& s, const char* what) {
  require(s.shape.numel() == 1 && s.shape.rank() == 0, "{} {} must be a scalar", what, s.shape);
}

// load / sum(load): each expert's share of the choices counted (zeros
// when none were).
std::vector<float> shares(const Tensor& load) {
  double total = 0;
  for (int64_t e = 0; e < load.numel(); ++e) total += load.f32()[e];
  std::vector<float> out(static_cast<size_t>(load.numel()), 0.0f);
  if (total > 0)
    for (size_t e = 0; e < out.size(); ++e) out[e] = static_cast<float>(load.f32()[e] / total);
  return out;
}

std::vector<PlacementSignature> token_sum_signatures(int rank, std::vector<Placement> before, size_t after,
                                                     Placement split_output) {
  std::vector<PlacementSignature> s;
  for (int dim = 0; dim + 1 < rank; ++dim) {
    std::vector<Placement> ins = before;
    ins.push_back(Placement::S(dim));
    for (size_t i = 0; i < after; ++i) ins.push_back(Placement::B());
    s.push_back({fmt::format("split_tokens_{}", dim), ins,
                 {split_output.is_split() ? Placement::S(dim) : split_output}});
  }
  s.push_back({"replicated", std::vector<Placement>(before.size() + 1 + after, Placement::B()), {Placement::B()}});
  return s;
}

OpDef make_moe_aux_loss() {
  OpDef d;
  d.name = "moe_aux_loss";
  d.constant_inputs = {0};  // load: counts, not differentiable
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    const int64_t E = in[1].shape[-1];
    require(in[0].shape == Shape{E}, "load {} must be ({}) for logits {}", in[0].shape, E, in[1].shape);
    return std::vector<TensorSpec>{f32({})};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const std::vector<float> share = shares(*in[0]);
    const double total = kernels::moe_balance_loss(rows_of(in[1]->shape()), in[0]->numel(), in[1]->f32(), share.data());
    out[0]->f32()[0] = static_cast<float>(a.get_float("scale") * total);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{
        kNoValue, g.add1("moe_aux_loss_grad", {n.inputs[0], n.inputs[1], dout[0]}, n.attrs, n.name + ".grad")};
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return token_sum_signatures(in[1].shape.rank(), {Placement::B()}, 0, Placement::P());
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({4}), f32({3, 2, 4})}, {{"scale", 0.5}}, {}, {true, false}}};
  };
  return d;
}

OpDef make_moe_aux_loss_grad() {
  OpDef d;
  d.name = "moe_aux_loss_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 3, 3);
    require_scalar(in[2], "dloss");
    return std::vector<TensorSpec>{f32(in[1].shape)};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const std::vector<float> share = shares(*in[0]);
    const auto scale = static_cast<float>(a.get_float("scale") * in[2]->f32()[0]);
    kernels::moe_balance_loss_backward(rows_of(in[1]->shape()), in[0]->numel(), in[1]->f32(), share.data(), scale,
                                       out[0]->f32());
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return token_sum_signatures(in[1].shape.rank(), {Placement::B()}, 1, Placement::S(0));
  };
  d.examples = [] { return std::vector<OpExample>{{{f32({4}), f32({3, 2, 4}), f32({})}, {{"scale", 0.5}}, {}, {true, false, false}}}; };
  return d;
}

OpDef make_moe_z_loss() {
  OpDef d;
  d.name = "moe_z_loss";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 1, 1);
    require(in[0].shape.rank() >= 2, "logits {} must be (tokens..., experts)", in[0].shape);
    return std::vector<TensorSpec>{f32({})};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const double sum = kernels::moe_z_loss(rows_of(in[0]->shape()), in[0]->shape()[-1], in[0]->f32());
    out[0]->f32()[0] = static_cast<float>(a.get_float("scale") * sum);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("moe_z_loss_grad", {n.inputs[0], dout[0]}, n.attrs, n.name + ".grad")};
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return token_sum_signatures(in[0].shape.rank(), {}, 0, Placement::P());
  };
  d.examples = [] { return std::vector<OpExample>{{{f32({3, 2, 5})}, {{"scale", 0.25}}, {}}}; };
  return d;
}

OpDef make_moe_z_loss_grad() {
  OpDef d;
  d.name = "moe_z_loss_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require_scalar(in[1], "dloss");
    return std::vector<TensorSpec>{f32(in[0].shape)};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const auto scale = static_cast<float>(a.get_float("scale") * in[1]->f32()[0]);
    kernels::moe_z_loss_backward(rows_of(in[0]->shape()), in[0]->shape()[-1], in[0]->f32(), scale, out[0]->f32());
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return token_sum_signatures(in[0].shape.rank(), {}, 1, Placement::S(0));
  };
  d.examples = [] { return std::vector<OpExample>{{{f32({3, 2, 5}), f32({})}, {{"scale", 0.25}}, {}}}; };
  return d;
}

// E x the choices per expert minus all choices, of `choice` (rows x k):
// an integer, E times the excess over the even count.
std::vector<double> choice_excess(const Tensor& choice, int64_t experts) {
  std::vector<double> excess(static_cast<size_t>(experts), 0.0);
  const int64_t n = choice.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = kernels::chosen_expert(choice.data<int32_t>()[i]);
    if (e >= experts) fail("moe_bias_balance: a choice of expert {}, but there are {} experts", e, experts);
    excess[static_cast<size_t>(e)] += double(experts);
  }
  for (double& x : excess) x -= double(n);
  return excess;
}

OpDef make_moe_bias_balance() {
  OpDef d;
  d.name = "moe_bias_balance";
  d.constant_inputs = {1};  // choice
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require(in[0].shape.rank() == 1, "bias {} must be (experts)", in[0].shape);
    require_dtype(in[1], DType::i32, "choice");
    return std::vector<TensorSpec>{f32({})};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const std::vector<double> excess = choice_excess(*in[1], in[0]->numel());
    double total = 0;
    for (size_t e = 0; e < excess.size(); ++e) total += double(in[0]->f32()[e]) * excess[e];
    out[0]->f32()[0] = static_cast<float>(a.get_float("scale") * total);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    Attrs attrs = n.attrs;
    attrs.set("experts", g.spec(n.inputs[0]).shape[0]);
    return std::vector<ValueId>{g.add1("moe_bias_balance_grad", {n.inputs[1], dout[0]}, attrs, n.name + ".grad"),
                                kNoValue};
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < in[1].shape.rank(); ++dim)
      s.push_back({fmt::format("split_tokens_{}", dim), {Placement::B(), Placement::S(dim)}, {Placement::P()}});
    // No whole signature: a choice made whole (a capacity routes the
    // batch together) is sliced, so the term stays a summand, as the
    // language model's loss is, and the bias's gradient partial.
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({4}), {Shape{3, 2, 2}, DType::i32}}, {{"scale", 1.0 / 12}}, {0, 4}}};
  };
  return d;
}

OpDef make_moe_bias_balance_grad() {
  OpDef d;
  d.name = "moe_bias_balance_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 2);
    require_scalar(in[1], "dloss");
    return std::vector<TensorSpec>{f32({a.get_int("experts")})};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const std::vector<double> excess = choice_excess(*in[0], out[0]->numel());
    const double scale = a.get_float("scale") * in[1]->f32()[0];
    for (size_t e = 0; e < excess.size(); ++e) out[0]->f32()[e] = static_cast<float>(scale * excess[e]);
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < in[0].shape.rank(); ++dim)
      s.push_back({fmt::format("split_tokens_{}", dim), {Placement::S(dim), Placement::B()}, {Placement::P()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{
        {{{Shape{3, 2, 2}, DType::i32}, f32({})}, {{"scale", 1.0 / 12}, {"experts", int64_t{4}}}, {4, 0}}};
  };
  return d;
}

PX_REGISTER_OP(moe_aux_loss, make_moe_aux_loss());
PX_REGISTER_OP(moe_aux_loss_grad, make_moe_aux_loss_grad());
PX_REGISTER_OP(moe_z_loss, make_moe_z_loss());
PX_REGISTER_OP(moe_z_loss_grad, make_moe_z_loss_grad());
PX_REGISTER_OP(moe_bias_balance, make_moe_bias_balance());
PX_REGISTER_OP(moe_bias_balance_grad, make_moe_bias_balance_grad());

}  // namespace
}  // namespace px::ops
