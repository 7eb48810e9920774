// moe_route: a mixture-of-experts router's decision (kernels/moe.h).
//   logits (L..., E) [, bias (E)] -> gates (L..., k), choice (L..., k) i32, load (E), dropped []
//   attrs: k; normalize (gates renormalised over the k chosen); capacity_factor
//          (0: dropless; else each expert takes at most
//          max(ceil(f * rows * k / E), min_capacity) of the rows' choices);
//          load_scale (the builder's 1 / (global rows * k): load is the
//          fraction of all choices each expert got, before dropping, and
//          dropped the fraction of all choices a capacity dropped)
// gates are differentiable; the choice is an integer and load a count,
// both constants to backward (the load-balancing loss reads the logits).
// The bias (DeepSeek-V3's balancing) only steers the choice: no gradient.
//
// Placement: each row routes alone in dropless mode, so any split of the
// rows works and load (a sum over rows) is partial. With a capacity, which
// choices are dropped depends on every row routed together, so the router
// runs whole (B): under data parallelism every rank routes the whole
// batch's logits (E floats a row, gathered) and drops exactly what one
// rank would.
#include <cmath>

#include "graph/ops/op_util.h"
#include "kernels/moe.h"

namespace px::ops {
namespace {

kernels::RouteShape moe_route_shape(const Attrs& a, const Shape& logits) {
  const int64_t rows = rows_of(logits), E = logits[-1], k = a.get_int("k");
  kernels::RouteShape s{.rows = rows, .experts = E, .k = k, .normalize = a.get_int("normalize", 1) != 0};
  const double f = a.get_float("capacity_factor", 0.0);
  if (f > 0) {
    const auto even_share = static_cast<int64_t>(std::ceil(f * double(rows * k) / double(E)));
    s.capacity = std::max(even_share, a.get_int("min_capacity", 4));
  }
  return s;
}

OpDef make_moe_route() {
  OpDef d;
  d.name = "moe_route";
  d.constant_inputs = {1};  // bias
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 2);
    require_dtype(in[0], DType::f32, "logits");
    const Shape& logits = in[0].shape;
    require(logits.rank() >= 2, "logits {} must be (rows..., experts)", logits);
    const int64_t E = logits[-1], k = a.get_int("k");
    require(k >= 1 && k <= E, "k={} must be in [1, experts={}]", k, E);
    require(a.get_float("capacity_factor", 0.0) >= 0, "capacity_factor {} must be >= 0 (0: dropless)",
            a.get_float("capacity_factor", 0.0));
    if (in.size() == 2) require(in[1].shape == Shape{E}, "bias {} must be ({}) for {} experts", in[1].shape, E, E);
    return std::vector<TensorSpec>{f32(with_last(logits, k)), {with_last(logits, k), DType::i32}, f32(Shape{E}),
                                   f32({})};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const kernels::RouteShape s = moe_route_shape(a, in[0]->shape());
    out[2]->zero();
    kernels::moe_route(s, in[0]->f32(), in.size() > 1 ? in[1]->f32() : nullptr, out[1]->data<int32_t>(),
                       out[0]->f32(), out[2]->f32());
    const auto scale = static_cast<float>(a.get_float("load_scale", 1.0));
    for (int64_t e = 0; e < s.experts; ++e) out[2]->f32()[e] *= scale;
    int64_t dropped = 0;
    for (int64_t i = 0; i < out[1]->numel(); ++i) dropped += out[1]->data<int32_t>()[i] < 0;
    out[3]->f32()[0] = scale * static_cast<float>(dropped);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const ValueId gates = n.outputs[0], choice = n.outputs[1];
    ValueId dlogits = g.add1("moe_route_grad", {n.inputs[0], choice, gates, dout[0]}, n.attrs, n.name + ".grad");
    std::vector<ValueId> grads{dlogits};
    if (n.inputs.size() > 1) grads.push_back(kNoValue);
    return grads;
  };
  d.cost = [](const auto& in, const auto& out, const Attrs& a) {
    OpCost c = streaming_cost(in, out);
    c.flops = double(in[0].shape.numel()) * double(4 + a.get_int("k"));  // softmax, then k passes
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    const int lead = in[0].shape.rank() - 1;
    const size_t n = in.size();
    std::vector<PlacementSignature> s;
    if (a.get_float("capacity_factor", 0.0) == 0)
      for (int dim = 0; dim < lead; ++dim) {
        std::vector<Placement> ins{Placement::S(dim)};
        if (n > 1) ins.push_back(Placement::B());
        s.push_back({fmt::format("split_rows_{}", dim), ins,
                     {Placement::S(dim), Placement::S(dim), Placement::P(), Placement::P()}});
      }
    s.push_back({"replicated", std::vector<Placement>(n, Placement::B()), std::vector<Placement>(4, Placement::B())});
    return s;
  };
  d.examples = [] {
    auto bias_small = [](std::vector<Tensor>& inputs, uint64_t) {
      for (int64_t e = 0; e < inputs[1].numel(); ++e) inputs[1].f32()[e] *= 0.05f;
    };
    return std::vector<OpExample>{
        {{f32({6, 5})}, {{"k", int64_t{2}}, {"load_scale", 1.0 / 12}}, {}},
        {{f32({2, 3, 4})}, {{"k", int64_t{1}}, {"normalize", int64_t{0}}, {"load_scale", 1.0 / 6}}, {}},
        {{f32({3, 4, 6}), f32({6})},
         {{"k", int64_t{2}}, {"capacity_factor", 1.0}, {"min_capacity", int64_t{1}}, {"load_scale", 1.0 / 24}},
         {},
         {},
         bias_small},
        {{f32({8, 4})},
         {{"k", int64_t{3}}, {"capacity_factor", 0.5}, {"min_capacity", int64_t{2}}, {"load_scale", 1.0 / 24}}, {}}};
  };
  return d;
}

// (logits, choice, gates, dgates) -> dlogits (L..., E).
OpDef make_moe_route_grad() {
  OpDef d;
  d.name = "moe_route_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 4, 4);
    require(in[3].shape == in[2].shape, "dgates {} must match gates {}", in[3].shape, in[2].shape);
    return std::vector<TensorSpec>{f32(in[0].shape)};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    kernels::moe_route_backward(moe_route_shape(a, in[0]->shape()), in[0]->f32(), in[1]->data<int32_t>(),
                                in[2]->f32(), in[3]->f32(), out[0]->f32());
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim + 1 < in[0].shape.rank(); ++dim)
      s.push_back({fmt::format("split_rows_{}", dim), std::vector<Placement>(4, Placement::S(dim)),
                   {Placement::S(dim)}});
    s.push_back({"replicated", std::vector<Placement>(4, Placement::B()), {Placement::B()}});
    return s;
  };
  d.examples = [] {
    auto consistent = [](std::vector<Tensor>& in, uint64_t) {
      // A real route's choice and gates (k = 2 of 5, renormalised).
      kernels::RouteShape s{.rows = 6, .experts = 5, .k = 2};
      Tensor counts = Tensor::zeros({5});
      kernels::moe_route(s, in[0].f32(), nullptr, in[1].data<int32_t>(), in[2].f32(), counts.f32());
    };
    return std::vector<OpExample>{{{f32({6, 5}), {Shape{6, 2}, DType::i32}, f32({6, 2}), f32({6, 2})},
                                   {{"k", int64_t{2}}},
                                   {0, 5},
                                   {},
                                   consistent}};
  };
  return d;
}

PX_REGISTER_OP(moe_route, make_moe_route());
PX_REGISTER_OP(moe_route_grad, make_moe_route_grad());

}  // namespace
}  // namespace px::ops
