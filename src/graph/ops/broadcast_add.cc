// broadcast_add: out = x + y with y broadcast over x's leading dims.
//   x (L..., S...), y (S...) -> out (L..., S...)
// GPT adds position embeddings (T, C) to token embeddings (B, T, C) with it.
#include "graph/ops/op_util.h"
#include "kernels/elementwise.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "broadcast_add";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    const Shape &x = in[0].shape, &y = in[1].shape;
    int lead = x.rank() - y.rank();
    require(lead >= 0, "y has rank {} > x's rank {}", y.rank(), x.rank());
    for (int i = 0; i < y.rank(); ++i)
      require(x[lead + i] == y[i], "y's shape {} must match the trailing dims of x {}", y, x);
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    int64_t cols = in[1]->numel();
    int64_t rows = cols == 0 ? 0 : in[0]->numel() / cols;
    kernels::add_bias(rows, cols, in[0]->f32(), in[1]->f32(), out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    ValueId dy = g.add1("sum_leading", {dout[0]}, {{"keep", int64_t{g.spec(n.inputs[1]).shape.rank()}}},
                        n.name + ".grad_y");
    return std::vector<ValueId>{dout[0], dy};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    int lead = in[0].shape.rank() - in[1].shape.rank();
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < lead; ++dim)
      s.push_back({fmt::format("split_{}", dim), {Placement::S(dim), Placement::B()}, {Placement::S(dim)}});
    for (int dim = lead; dim < in[0].shape.rank(); ++dim)
      s.push_back({fmt::format("split_{}", dim), {Placement::S(dim), Placement::S(dim - lead)},
                   {Placement::S(dim)}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    s.push_back({"partial", {Placement::P(), Placement::P()}, {Placement::P()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({4, 5, 3}), f32({5, 3})}, {}, {}},
                                  {{f32({7, 6}), f32({6})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(broadcast_add, make());

}  // namespace
}  // namespace px::ops
