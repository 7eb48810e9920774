// bias_add: y = x + b, the bias of a layer added over x's leading dims.
//   x (M..., N), b (N) -> y (M..., N)
// Backward: dx = dy, db = sum_leading(dy), which a batch split makes P (the
// bias gradient's allreduce). No signature takes a partial x with a whole
// b: every rank would add all of b to its summand. A row-parallel layer's
// partial output is reduced (P -> B or P -> S) before its bias is added.
// Under bf16 the lowering may stamp it to store y in bf16 (y read only by
// bf16 GEMM operands and gelu: graph/precision.h); x and b stay fp32.
#include "graph/ops/op_util.h"
#include "graph/precision.h"
#include "kernels/elementwise.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "bias_add";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 2);
    const Shape &x = in[0].shape, &b = in[1].shape;
    require(x.rank() >= 1 && b == Shape({x[-1]}), "bias {} must be [{}], the last dim of x {}", b,
            x.rank() >= 1 ? x[-1] : 0, x);
    return std::vector<TensorSpec>{{x, stores_in_bf16(a) ? DType::bf16 : DType::f32}};
  };
  d.stores_bf16 = true;
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t rows = rows_of(in[0]->shape()), cols = in[1]->numel();
    if (out[0]->dtype() == DType::bf16)
      kernels::add_bias(rows, cols, in[0]->f32(), in[1]->f32(), static_cast<kernels::bf16*>(out[0]->raw()));
    else
      kernels::add_bias(rows, cols, in[0]->f32(), in[1]->f32(), out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    ValueId db = g.add1("sum_leading", {dout[0]}, {{"keep", int64_t{1}}}, n.name + ".grad_b");
    return std::vector<ValueId>{dout[0], db};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < r - 1; ++dim)
      s.push_back({fmt::format("split_{}", dim), {Placement::S(dim), Placement::B()}, {Placement::S(dim)}});
    // Features split (after a column-parallel linear): each rank adds its block of b.
    s.push_back({"split_features", {Placement::S(r - 1), Placement::S(0)}, {Placement::S(r - 1)}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 5, 7}), f32({7})}, {}, {}},
                                  {{f32({13, 6}), f32({6})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(bias_add, make());

}  // namespace
}  // namespace px::ops
