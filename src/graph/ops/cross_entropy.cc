// Softmax cross-entropy with integer targets (see kernels/cross_entropy.h).
//   cross_entropy:      logits (N..., V), targets (N...) i32 -> loss [], lse (N...)
//   cross_entropy_grad: logits, targets, lse, dloss []      -> dlogits (N..., V)
// attrs: scale (1 / global number of rows for a mean). The loss is a scaled
// sum over rows, so on a batch split each shard's loss is a summand (P).
#include "graph/ops/op_util.h"
#include "kernels/cross_entropy.h"

namespace px::ops {
namespace {

void check_targets(const Tensor& targets, int64_t V) {
  const int32_t* p = targets.data<int32_t>();
  for (int64_t i = 0, n = targets.numel(); i < n; ++i)
    if (p[i] < 0 || p[i] >= V)
      fail("cross_entropy: target {} at position {} is outside the {} classes [0, {})", p[i], i, V, V);
}

void require_logits_targets(const std::vector<TensorSpec>& in) {
  require_dtype(in[1], DType::i32, "targets");
  const Shape &l = in[0].shape, &t = in[1].shape;
  require(l.rank() == t.rank() + 1, "logits {} must be targets {} plus a class dim", l, t);
  for (int i = 0; i < t.rank(); ++i) require(l[i] == t[i], "logits {} and targets {} disagree", l, t);
}

OpDef make_cross_entropy() {
  OpDef d;
  d.name = "cross_entropy";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require_logits_targets(in);
    return std::vector<TensorSpec>{f32({}), f32(in[1].shape)};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    int64_t V = in[0]->shape()[-1];
    check_targets(*in[1], V);
    out[0]->f32()[0] = kernels::cross_entropy(in[1]->numel(), V, in[0]->f32(), in[1]->data<int32_t>(),
                                              static_cast<float>(a.get_float("scale")), out[1]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    ValueId dl = g.add1("cross_entropy_grad", {n.inputs[0], n.inputs[1], n.outputs[1], dout[0]}, n.attrs,
                        n.name + ".grad");
    return std::vector<ValueId>{dl, kNoValue};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = 4.0 * double(in[0].shape.numel());
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < in[1].shape.rank(); ++dim)
      s.push_back({fmt::format("data_parallel_{}", dim), {Placement::S(dim), Placement::S(dim)},
                   {Placement::P(), Placement::S(dim)}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B(), Placement::B()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({7, 5}), {Shape{7}, DType::i32}}, {{"scale", 1.0 / 7}}, {0, 5}},
        {{f32({3, 4, 11}), {Shape{3, 4}, DType::i32}}, {{"scale", 1.0 / 12}}, {0, 11}}};
  };
  return d;
}

OpDef make_cross_entropy_grad() {
  OpDef d;
  d.name = "cross_entropy_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 4, 4);
    require_logits_targets(in);
    require(in[3].shape.rank() == 0, "dloss must be a scalar, got {}", in[3].shape);
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    kernels::cross_entropy_backward(in[1]->numel(), in[0]->shape()[-1], in[0]->f32(), in[1]->data<int32_t>(),
                                    in[2]->f32(), static_cast<float>(a.get_float("scale")),
                                    in[3]->f32()[0], out[0]->f32());
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 4); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < in[1].shape.rank(); ++dim) {
      auto S = Placement::S(dim);
      s.push_back({fmt::format("data_parallel_{}", dim), {S, S, S, Placement::B()}, {S}});
    }
    s.push_back({"replicated", std::vector<Placement>(4, Placement::B()), {Placement::B()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({7, 5}), {Shape{7}, DType::i32}, f32({7}), f32({})}, {{"scale", 1.0 / 7}}, {0, 5, 0, 0}}};
  };
  return d;
}

PX_REGISTER_OP(cross_entropy, make_cross_entropy());
PX_REGISTER_OP(cross_entropy_grad, make_cross_entropy_grad());

}  // namespace
}  // namespace px::ops
