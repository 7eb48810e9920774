// expand_like: b broadcast over the leading dims of x — x gives only the
// shape (its local one on a shard, so a split batch stays split). The
// gradient of sum_leading: every element of x receives the sum's gradient.
//   expand_like: x (L..., S...), b (S...) -> y (L..., S...)
// Backward: db = sum_leading(dy) over the leading dims; x gets none (its
// values are never read). Any dim of x may be split, b along with it on
// the trailing dims; b partial over a whole x gives a partial y.
#include <algorithm>

#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "expand_like";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require_dtype(in[1], DType::f32, "b");
    const Shape &x = in[0].shape, &b = in[1].shape;
    require(b.rank() <= x.rank() && std::equal(b.dims().begin(), b.dims().end(), x.dims().end() - b.rank()),
            "b {} must be the trailing dims of x {}", b, x);
    return std::vector<TensorSpec>{f32(x)};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t n = out[0]->numel(), inner = in[1]->numel();
    const float* b = in[1]->f32();
    float* y = out[0]->f32();
    for (int64_t i = 0; i < n; ++i) y[i] = b[i % inner];
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const int64_t keep = g.spec(n.inputs[1]).shape.rank();
    return std::vector<ValueId>{kNoValue,
                                g.add1("sum_leading", {dout[0]}, {{"keep", keep}}, n.name + ".grad_b")};
  };
  d.constant_inputs = {0};  // only x's shape is read
  d.cost = [](const auto&, const auto& out, const Attrs&) {
    return OpCost{.flops = 0, .bytes_read = 0, .bytes_written = 4.0 * double(out[0].shape.numel())};
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    const int rank = in[0].shape.rank(), lead = rank - in[1].shape.rank();
    std::vector<PlacementSignature> s{{"replicated", {Placement::B(), Placement::B()}, {Placement::B()}},
                                      {"partial", {Placement::B(), Placement::P()}, {Placement::P()}}};
    for (int k = 0; k < rank; ++k)
      s.push_back({fmt::format("split_{}", k), {Placement::S(k), k < lead ? Placement::B() : Placement::S(k - lead)},
                   {Placement::S(k)}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({4, 5, 3}), f32({5, 3})}, {}, {}},
                                  {{f32({7, 6}), f32({6})}, {}, {}},
                                  {{f32({6}), f32({})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(expand_like, make());

}  // namespace
}  // namespace px::ops
