// A token's k copies for its k experts, and their weighted sum back.
// Legend: L... the token dims, k choices, C features.
//   moe_expand:    x (L..., C) [, gates (L..., k)] -> xs (L..., k, C): xs[.., j, :] = x (· gates[.., j])
//                  attrs: k
//   moe_combine:   ys (L..., k, C) [, gates (L..., k)] -> y (L..., C) = sum_j ys[.., j, :] (· gates[.., j])
//   moe_gate_grad: ys (L..., k, C), dy (L..., C) -> dgates (L..., k) = <ys[.., j, :], dy>
// expand and combine are each other's adjoints; a copy its expert dropped
// was computed as zeros, so it adds nothing and its gate gets no gradient.
// The copies sit next to their token (token-major), so every split of the
// tokens or the features is a split of the copies alike.
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

// (x-like (L..., [k,] C), [gates (L..., k)]) splits: token dims alike, or the
// features with the gates whole; partial in x (linear in it) with gates whole.
std::vector<PlacementSignature> copy_signatures(int token_dims, int in_rank, int out_rank, bool gated) {
  std::vector<PlacementSignature> s;
  auto with_gates = [gated](std::vector<Placement> ins, const Placement& gates) {
    if (gated) ins.push_back(gates);
    return ins;
  };
  for (int dim = 0; dim < token_dims; ++dim)
    s.push_back({fmt::format("split_tokens_{}", dim), with_gates({Placement::S(dim)}, Placement::S(dim)),
                 {Placement::S(dim)}});
  s.push_back({"split_features", with_gates({Placement::S(in_rank - 1)}, Placement::B()),
               {Placement::S(out_rank - 1)}});
  s.push_back({"partial", with_gates({Placement::P()}, Placement::B()), {Placement::P()}});
  s.push_back({"replicated", with_gates({Placement::B()}, Placement::B()), {Placement::B()}});
  return s;
}

// Token t's copy j is row t*k + j of (T*k, C); gates (T, k) or null.
void expand_rows(int64_t T, int64_t k, int64_t C, const float* x, const float* gates, float* xs) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const float g = gates ? gates[t * k + j] : 1.0f;
      for (int64_t c = 0; c < C; ++c) xs[(t * k + j) * C + c] = g * x[t * C + c];
    }
}

void combine_rows(int64_t T, int64_t k, int64_t C, const float* ys, const float* gates, float* y) {
  for (int64_t t = 0; t < T; ++t) {
    float* out = y + t * C;
    for (int64_t c = 0; c < C; ++c) out[c] = 0;
    for (int64_t j = 0; j < k; ++j) {
      const float g = gates ? gates[t * k + j] : 1.0f;
      for (int64_t c = 0; c < C; ++c) out[c] += g * ys[(t * k + j) * C + c];
    }
  }
}

void require_gates(const std::vector<TensorSpec>& in, const Shape& tokens, int64_t k) {
  if (in.size() < 2) return;
  std::vector<int64_t> want(tokens.dims().begin(), tokens.dims().end() - 1);
  want.push_back(k);
  require(in[1].shape == Shape(want), "gates {} must be {} (the tokens' dims, then k)", in[1].shape, Shape(want));
}

OpDef make_moe_expand() {
  OpDef d;
  d.name = "moe_expand";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 2);
    const int64_t k = a.get_int("k");
    require(k >= 1 && in[0].shape.rank() >= 2, "k={} must be positive and x {} (tokens..., C)", k, in[0].shape);
    require_gates(in, in[0].shape, k);
    std::vector<int64_t> dims = in[0].shape.dims();
    dims.insert(dims.end() - 1, k);
    return std::vector<TensorSpec>{f32(Shape(dims))};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t C = in[0]->shape()[-1], T = rows_of(in[0]->shape()), k = a.get_int("k");
    expand_rows(T, k, C, in[0]->f32(), in.size() > 1 ? in[1]->f32() : nullptr, out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    std::vector<ValueId> ins{dout[0]};
    if (n.inputs.size() > 1) ins.push_back(n.inputs[1]);
    std::vector<ValueId> grads{g.add1("moe_combine", ins, {}, n.name + ".grad_x")};
    if (n.inputs.size() > 1) grads.push_back(g.add1("moe_gate_grad", {dout[0], n.inputs[0]}, {}, n.name + ".grad_gates"));
    return grads;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    const int r = in[0].shape.rank();
    return copy_signatures(r - 1, r, r + 1, in.size() > 1);
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 2, 4})}, {{"k", int64_t{2}}}, {}},
                                  {{f32({5, 3}), f32({5, 3})}, {{"k", int64_t{3}}}, {}}};
  };
  return d;
}

OpDef make_moe_combine() {
  OpDef d;
  d.name = "moe_combine";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 1, 2);
    require(in[0].shape.rank() >= 3, "ys {} must be (tokens..., k, C)", in[0].shape);
    std::vector<int64_t> dims = in[0].shape.dims();
    dims.erase(dims.end() - 2);
    require_gates(in, Shape(dims), in[0].shape[-2]);
    return std::vector<TensorSpec>{f32(Shape(dims))};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Shape& ys = in[0]->shape();
    const int64_t C = ys[-1], k = ys[-2], T = rows_of(ys) / k;
    combine_rows(T, k, C, in[0]->f32(), in.size() > 1 ? in[1]->f32() : nullptr, out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const int64_t k = g.spec(n.inputs[0]).shape[-2];
    std::vector<ValueId> ins{dout[0]};
    if (n.inputs.size() > 1) ins.push_back(n.inputs[1]);
    std::vector<ValueId> grads{g.add1("moe_expand", ins, {{"k", k}}, n.name + ".grad_ys")};
    if (n.inputs.size() > 1) grads.push_back(g.add1("moe_gate_grad", {n.inputs[0], dout[0]}, {}, n.name + ".grad_gates"));
    return grads;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    const int r = in[0].shape.rank();
    return copy_signatures(r - 2, r, r - 1, in.size() > 1);
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 2, 2, 4})}, {}, {}}, {{f32({5, 3, 4}), f32({5, 3})}, {}, {}}};
  };
  return d;
}

OpDef make_moe_gate_grad() {
  OpDef d;
  d.name = "moe_gate_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    const Shape &ys = in[0].shape, &dy = in[1].shape;
    require(ys.rank() >= 3 && dy.rank() + 1 == ys.rank(), "ys {} must be dy {} with k before the features", ys, dy);
    std::vector<int64_t> dims = ys.dims();
    dims.pop_back();
    return std::vector<TensorSpec>{f32(Shape(dims))};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Shape& ys = in[0]->shape();
    const int64_t C = ys[-1], k = ys[-2], T = rows_of(ys) / k;
    const float *y = in[0]->f32(), *dy = in[1]->f32();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j) {
        float dot = 0;
        for (int64_t c = 0; c < C; ++c) dot += y[(t * k + j) * C + c] * dy[t * C + c];
        out[0]->f32()[t * k + j] = dot;
      }
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    const int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < r - 2; ++dim)
      s.push_back({fmt::format("split_tokens_{}", dim), {Placement::S(dim), Placement::S(dim)}, {Placement::S(dim)}});
    s.push_back({"split_features", {Placement::S(r - 1), Placement::S(r - 2)}, {Placement::P()}});
    s.push_back({"partial_ys", {Placement::P(), Placement::B()}, {Placement::P()}});
    s.push_back({"partial_dy", {Placement::B(), Placement::P()}, {Placement::P()}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    return s;
  };
  d.examples = [] { return std::vector<OpExample>{{{f32({3, 2, 2, 4}), f32({3, 2, 4})}, {}, {}}}; };
  return d;
}

PX_REGISTER_OP(moe_expand, make_moe_expand());
PX_REGISTER_OP(moe_combine, make_moe_combine());
PX_REGISTER_OP(moe_gate_grad, make_moe_gate_grad());

}  // namespace
}  // namespace px::ops
