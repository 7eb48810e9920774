// mse: the squared error loss scale · Σ (y - t)² over every element, for
// `--loss mse` on an imported model (scale 1 / elements of the global
// batch: the mean). A scaled sum, so on a split each shard's loss is a
// summand (P), as cross_entropy's is.
// mse_grad: dy = 2 · scale · dloss · (y - t); the target's gradient is its
// negation (a target computed from parameters trains too).
//   mse:      y (N...), t (N...)       -> loss []
//   mse_grad: y (N...), t (N...), dloss [] -> dy (N...)
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

void require_pair(const std::vector<TensorSpec>& in) {
  require_dtype(in[0], DType::f32, "y");
  require_dtype(in[1], DType::f32, "targets");
  require(in[0].shape == in[1].shape, "y {} and targets {} must have one shape", in[0].shape, in[1].shape);
}

OpDef make_mse() {
  OpDef d;
  d.name = "mse";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require_pair(in);
    return std::vector<TensorSpec>{f32({})};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const float *y = in[0]->f32(), *t = in[1]->f32();
    double sum = 0;
    for (int64_t i = 0, n = in[0]->numel(); i < n; ++i) sum += double(y[i] - t[i]) * double(y[i] - t[i]);
    out[0]->f32()[0] = static_cast<float>(sum * a.get_float("scale"));
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const ValueId dy = g.add1("mse_grad", {n.inputs[0], n.inputs[1], dout[0]}, n.attrs, n.name + ".grad");
    const ValueId dt = g.add1("affine", {dy}, {{"scale", -1.0}}, n.name + ".grad_targets");
    return std::vector<ValueId>{dy, dt};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = 3.0 * double(in[0].shape.numel());
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s{{"replicated", {Placement::B(), Placement::B()}, {Placement::B()}}};
    for (int dim = 0; dim < in[0].shape.rank(); ++dim)
      s.push_back({fmt::format("split_{}", dim), {Placement::S(dim), Placement::S(dim)}, {Placement::P()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({6, 5}), f32({6, 5})}, {{"scale", 1.0 / 30}}, {}},
                                  {{f32({4, 1, 3, 3}), f32({4, 1, 3, 3})}, {{"scale", 0.5}}, {}}};
  };
  return d;
}

OpDef make_mse_grad() {
  OpDef d;
  d.name = "mse_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 3, 3);
    require_pair(in);
    require(in[2].shape.rank() == 0, "dloss {} must be a scalar", in[2].shape);
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const float *y = in[0]->f32(), *t = in[1]->f32();
    const float k = static_cast<float>(2.0 * a.get_float("scale")) * in[2]->f32()[0];
    float* dy = out[0]->f32();
    for (int64_t i = 0, n = in[0]->numel(); i < n; ++i) dy[i] = k * (y[i] - t[i]);
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 2); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s{
        {"replicated", {Placement::B(), Placement::B(), Placement::B()}, {Placement::B()}}};
    for (int dim = 0; dim < in[0].shape.rank(); ++dim)
      s.push_back({fmt::format("split_{}", dim), {Placement::S(dim), Placement::S(dim), Placement::B()},
                   {Placement::S(dim)}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({6, 5}), f32({6, 5}), f32({})}, {{"scale", 1.0 / 30}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(mse, make_mse());
PX_REGISTER_OP(mse_grad, make_mse_grad());

}  // namespace
}  // namespace px::ops
