// sum_leading: sums x over its leading dims, keeping the trailing `keep` dims.
//   x (L..., S...) -> out (S...)          attrs: keep = rank of S
// The gradient of a bias or a broadcast operand. Under a batch split its
// result is partial (P): this is where data parallelism's gradient
// allreduce comes from.
#include <cstring>

#include "graph/ops/op_util.h"
#include "kernels/elementwise.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "sum_leading";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    int keep = static_cast<int>(a.get_int("keep"));
    const Shape& x = in[0].shape;
    require(keep >= 0 && keep <= x.rank(), "keep={} must be in [0, {}]", keep, x.rank());
    return std::vector<TensorSpec>{
        f32(Shape(std::vector<int64_t>(x.dims().end() - keep, x.dims().end())))};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    int64_t cols = out[0]->numel();
    int64_t rows = cols == 0 ? 0 : in[0]->numel() / cols;
    out[0]->zero();
    kernels::bias_grad(rows, cols, in[0]->f32(), out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    // d/dx of a sum over leading dims: dout broadcast back over them, in
    // x's shape as each shard holds it (a split batch stays split).
    return std::vector<ValueId>{g.add1("expand_like", {n.inputs[0], dout[0]}, {}, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = double(in[0].shape.numel());
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    int keep = static_cast<int>(a.get_int("keep"));
    int lead = in[0].shape.rank() - keep;
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < lead; ++dim)
      s.push_back({fmt::format("reduce_split_{}", dim), {Placement::S(dim)}, {Placement::P()}});
    for (int dim = lead; dim < in[0].shape.rank(); ++dim)
      s.push_back({fmt::format("split_{}", dim), {Placement::S(dim)}, {Placement::S(dim - lead)}});
    s.push_back({"replicated", {Placement::B()}, {Placement::B()}});
    s.push_back({"partial", {Placement::P()}, {Placement::P()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({4, 5, 3})}, {{"keep", int64_t{2}}}, {}},
                                  {{f32({7, 6})}, {{"keep", int64_t{1}}}, {}},
                                  {{f32({6})}, {{"keep", int64_t{0}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(sum_leading, make());

}  // namespace
}  // namespace px::ops
