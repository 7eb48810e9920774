// layernorm over the last dim, with saved statistics for backward.
//   x (R..., C), gamma (C), beta (C) -> y (R..., C), mean (R...), rstd (R...)
// layernorm_grad: (dy, x, gamma, mean, rstd) -> dx, dgamma, dbeta.
// attrs: eps (default 1e-5, torch's).
#include "graph/ops/op_util.h"
#include "kernels/layernorm.h"

namespace px::ops {
namespace {

Shape rows_shape(const Shape& x) {
  return Shape(std::vector<int64_t>(x.dims().begin(), x.dims().end() - 1));
}

std::vector<PlacementSignature> row_split_signatures(int rank, std::vector<Placement> row_inputs_mask,
                                                     std::vector<Placement> outputs_when_split) {
  // row_inputs_mask: S(0) marks inputs split with the rows, B replicated params.
  std::vector<PlacementSignature> s;
  for (int dim = 0; dim < rank - 1; ++dim) {
    PlacementSignature sig{fmt::format("split_{}", dim), {}, {}};
    for (const auto& p : row_inputs_mask) sig.inputs.push_back(p.is_split() ? Placement::S(dim) : p);
    for (const auto& p : outputs_when_split) sig.outputs.push_back(p.is_split() ? Placement::S(dim) : p);
    s.push_back(sig);
  }
  s.push_back({"replicated", std::vector<Placement>(row_inputs_mask.size(), Placement::B()),
               std::vector<Placement>(outputs_when_split.size(), Placement::B())});
  return s;
}

OpDef make_layernorm() {
  OpDef d;
  d.name = "layernorm";
  d.differentiable_outputs = 1;
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 3, 3);
    const Shape& x = in[0].shape;
    require(x.rank() >= 1, "x must have rank >= 1");
    require(in[1].shape == Shape({x[-1]}) && in[2].shape == Shape({x[-1]}),
            "gamma {} and beta {} must be [{}]", in[1].shape, in[2].shape, x[-1]);
    return std::vector<TensorSpec>{in[0], f32(rows_shape(x)), f32(rows_shape(x))};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    int64_t C = in[0]->shape()[-1];
    kernels::layernorm(rows_of(in[0]->shape()), C, static_cast<float>(a.get_float("eps", 1e-5)),
                       in[0]->f32(), in[1]->f32(), in[2]->f32(), out[0]->f32(), out[1]->f32(),
                       out[2]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    auto grads = g.add("layernorm_grad", {dout[0], n.inputs[0], n.inputs[1], n.outputs[1], n.outputs[2]},
                       {}, n.name + ".grad");
    return grads;
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 8); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    auto S = Placement::S(0), B = Placement::B();
    return row_split_signatures(in[0].shape.rank(), {S, B, B}, {S, S, S});
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 5, 7}), f32({7}), f32({7})}, {}, {}},
                                  {{f32({6, 13}), f32({13}), f32({13})}, {{"eps", 1e-3}}, {}}};
  };
  return d;
}

OpDef make_layernorm_grad() {
  OpDef d;
  d.name = "layernorm_grad";
  d.differentiable_outputs = 3;
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 5, 5);
    require(in[0].shape == in[1].shape, "dy {} and x {} must match", in[0].shape, in[1].shape);
    return std::vector<TensorSpec>{in[1], in[2], in[2]};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    out[1]->zero();
    out[2]->zero();
    kernels::layernorm_backward(rows_of(in[1]->shape()), in[1]->shape()[-1], in[1]->f32(), in[2]->f32(),
                                in[3]->f32(), in[4]->f32(), in[0]->f32(), out[0]->f32(), out[1]->f32(),
                                out[2]->f32());
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 10); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    auto S = Placement::S(0), B = Placement::B(), P = Placement::P();
    return row_split_signatures(in[1].shape.rank(), {S, S, B, S, S}, {S, P, P});
  };
  d.examples = [] {
    // mean/rstd are consistent enough for checking placement: any finite values work.
    return std::vector<OpExample>{
        {{f32({3, 5, 7}), f32({3, 5, 7}), f32({7}), f32({3, 5}), f32({3, 5})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(layernorm, make_layernorm());
PX_REGISTER_OP(layernorm_grad, make_layernorm_grad());

}  // namespace
}  // namespace px::ops
