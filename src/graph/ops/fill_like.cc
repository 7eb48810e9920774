// fill_like: a constant block shaped like x but for one dim: x's shape with
// dim `dim` of size `length`, every element `value`, or every row the
// pattern `values` — the constant pieces of an imported Concat
// (torch.cat([h, torch.zeros(n, k)], 1), or of a table broadcast over the
// rows), taking the rows and any split from the computed value they are
// joined to.
//   fill_like: x (N, A..., S, Z...) -> y (N, A..., length, Z...)
//              attrs: dim, length, and value or values (y's unsplit shape
//              less the rows dim N, row-major; dim > 0)
// y does not depend on x's values: its gradient is zeros (a fill_like of
// x's own size along dim). Any dim but `dim` may be split, as x's is; a
// shard of a pattern reads its elements at their unsplit positions (the
// output's box), so it holds what the one-rank block holds there.
#include <algorithm>

#include "core/error.h"
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make_fill_like() {
  OpDef d;
  d.name = "fill_like";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "x");
    const int64_t dim = a.get_int("dim"), length = a.get_int("length");
    require(dim >= 0 && dim < in[0].shape.rank(), "dim {} outside x {}", dim, in[0].shape);
    require(length > 0, "length {} must be positive", length);
    require(a.has("value") != a.has("values"), "one of value and values");
    require(!a.has("values") || dim > 0, "a pattern repeats along the rows: dim {} must not be 0", dim);
    std::vector<int64_t> y = in[0].shape.dims();
    y[static_cast<size_t>(dim)] = length;
    return std::vector<TensorSpec>{f32(Shape(y))};
  };
  d.forward = [](const OpContext& ctx, const Attrs& a, const std::vector<const Tensor*>&,
                 const std::vector<Tensor*>& out) {
    if (a.has("value")) return out[0]->fill(static_cast<float>(a.get_float("value")));
    const std::vector<double>& values = a.get_floats("values");
    const ShardBox& box = ctx.output_box(0);
    const Shape& local = out[0]->shape();
    const int rank = local.rank();
    std::vector<int64_t> stride(static_cast<size_t>(rank), 1);  // the pattern's unsplit strides (dims 1..)
    for (int d = rank - 2; d >= 1; --d) stride[static_cast<size_t>(d)] = stride[static_cast<size_t>(d) + 1] * box.extent_of(d + 1, local[d + 1]);
    PX_CHECK_EQ(static_cast<int64_t>(values.size()), rank < 2 ? 1 : stride[1] * box.extent_of(1, local[1]));
    const int64_t per_row = local.numel(1, rank);
    float* y = out[0]->f32();
    for (int64_t i = 0; i < per_row; ++i) {
      int64_t rest = i, at = 0;
      for (int d = rank - 1; d >= 1; --d) {
        at += (box.offset_of(d) + rest % local[d]) * stride[static_cast<size_t>(d)];
        rest /= local[d];
      }
      y[i] = static_cast<float>(values[static_cast<size_t>(at)]);
    }
    for (int64_t r = 1; r < local[0]; ++r) std::copy(y, y + per_row, y + r * per_row);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>&) {
    const int64_t dim = n.attrs.get_int("dim");
    const int64_t size = g.spec(n.inputs[0]).shape[static_cast<int>(dim)];
    return std::vector<ValueId>{g.add1("fill_like", {n.inputs[0]}, {{"dim", dim}, {"length", size}, {"value", 0.0}},
                                       n.name + ".grad")};
  };
  d.cost = [](const auto&, const auto& out, const Attrs&) {
    return OpCost{.flops = 0, .bytes_read = 0, .bytes_written = 4.0 * double(out[0].shape.numel())};
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    std::vector<PlacementSignature> s{{"replicated", {Placement::B()}, {Placement::B()}}};
    for (int k = 0; k < in[0].shape.rank(); ++k)
      if (k != a.get_int("dim")) s.push_back({fmt::format("split_{}", k), {Placement::S(k)}, {Placement::S(k)}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({4, 3})}, {{"dim", int64_t{1}}, {"length", int64_t{2}}, {"value", 0.0}}, {}},
        {{f32({2, 3, 4})}, {{"dim", int64_t{1}}, {"length", int64_t{5}}, {"value", 1.5}}, {}},
        {{f32({3, 4, 2})},
         {{"dim", int64_t{1}}, {"length", int64_t{3}}, {"values", std::vector<double>{1, 2, 3, 4, 5, 6}}},
         {}}};
  };
  return d;
}

PX_REGISTER_OP(fill_like, make_fill_like());

}  // namespace
}  // namespace px::ops
