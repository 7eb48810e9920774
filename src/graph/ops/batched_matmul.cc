// batched_matmul: y = op(a) · op(b) for every index of the leading (batch)
// dims, op transposing the last two dims when trans_a / trans_b is set —
// attention's q·kᵀ and p·v in imported graphs. Legend: L... batch dims,
// M rows, K inner, N columns.
//   a (L..., M, K) [(L..., K, M) with trans_a], b (L..., K, N) [(L..., N, K)
//   with trans_b] -> y (L..., M, N)
// Backward (closed over the flags (0,0), (0,1), (1,0) it uses):
//   (0,0): da = dy·bᵀ (0,1),  db = aᵀ·dy (1,0)
//   (0,1): da = dy·b  (0,0),  db = dyᵀ·a (1,0)
//   (1,0): da = b·dyᵀ (0,1),  db = a·dy  (0,0)
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

struct Dims {
  int64_t batch, M, K, N;
};

Dims dims_of(const Shape& a, const Shape& b, bool ta, bool tb) {
  const int r = a.rank();
  return {a.numel(0, r - 2), ta ? a[r - 1] : a[r - 2], ta ? a[r - 2] : a[r - 1], tb ? b[r - 2] : b[r - 1]};
}

ValueId bmm(Graph& g, ValueId a, ValueId b, bool ta, bool tb, const std::string& name) {
  return g.add1("batched_matmul", {a, b}, {{"trans_a", int64_t{ta}}, {"trans_b", int64_t{tb}}}, name);
}

OpDef make() {
  OpDef d;
  d.name = "batched_matmul";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& at) {
    require_count(in, 2, 2);
    const Shape &a = in[0].shape, &b = in[1].shape;
    const bool ta = at.get_int("trans_a", 0) != 0, tb = at.get_int("trans_b", 0) != 0;
    require(!(ta && tb), "trans_a and trans_b together are not supported");
    require(a.rank() >= 3 && a.rank() == b.rank(), "a {} and b {} must have the same rank >= 3", a, b);
    for (int i = 0; i + 2 < a.rank(); ++i) require(a[i] == b[i], "batch dims of a {} and b {} differ", a, b);
    const Dims k = dims_of(a, b, ta, tb);
    require((tb ? b[-1] : b[-2]) == k.K, "inner dims differ: a {} and b {} (trans_a={}, trans_b={})", a, b, ta, tb);
    std::vector<int64_t> y(a.dims().begin(), a.dims().end() - 2);
    y.push_back(k.M);
    y.push_back(k.N);
    return std::vector<TensorSpec>{f32(Shape(y))};
  };
  // Under bf16 (graph/precision.h) each product rounds its operands; its
  // backward products inherit the stamp.
  d.mixed_precision = true;
  d.bf16_gemm = true;
  d.bf16_inputs = {0, 1};
  d.forward = [](const OpContext&, const Attrs& at, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const bool ta = at.get_int("trans_a", 0) != 0, tb = at.get_int("trans_b", 0) != 0;
    const Dims k = dims_of(in[0]->shape(), in[1]->shape(), ta, tb);
    gemm_batched(at, k.batch, ta, tb, k.M, k.N, k.K, *in[0], ta ? k.M : k.K, k.M * k.K, *in[1], tb ? k.K : k.N,
                 k.K * k.N, out[0]->f32(), k.N, k.M * k.N);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const bool ta = n.attrs.get_int("trans_a", 0) != 0, tb = n.attrs.get_int("trans_b", 0) != 0;
    const ValueId a = n.inputs[0], b = n.inputs[1], dy = dout[0];
    const std::string ga = n.name + ".grad_a", gb = n.name + ".grad_b";
    if (ta) return std::vector<ValueId>{bmm(g, b, dy, false, true, ga), bmm(g, a, dy, false, false, gb)};
    if (tb) return std::vector<ValueId>{bmm(g, dy, b, false, false, ga), bmm(g, dy, a, true, false, gb)};
    return std::vector<ValueId>{bmm(g, dy, b, false, true, ga), bmm(g, a, dy, true, false, gb)};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs& at) {
    OpCost c = streaming_cost(in, out);
    const Dims k = dims_of(in[0].shape, in[1].shape, at.get_int("trans_a", 0) != 0, at.get_int("trans_b", 0) != 0);
    c.flops = 2.0 * double(k.batch) * double(k.M) * double(k.N) * double(k.K);
    return c;
  };
  // Any batch dim may be split (heads across tensor-parallel ranks, rows
  // across data-parallel ones); the matrices stay whole.
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s;
    for (int i = 0; i + 2 < in[0].shape.rank(); ++i)
      s.push_back({fmt::format("split_{}", i), {Placement::S(i), Placement::S(i)}, {Placement::S(i)}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    return s;
  };
  d.examples = [] {
    auto flags = [](int64_t ta, int64_t tb) { return Attrs{{"trans_a", ta}, {"trans_b", tb}}; };
    return std::vector<OpExample>{{{f32({2, 3, 4, 5}), f32({2, 3, 5, 6})}, flags(0, 0), {}},
                                  {{f32({3, 4, 5}), f32({3, 6, 5})}, flags(0, 1), {}},
                                  {{f32({3, 5, 4}), f32({3, 5, 6})}, flags(1, 0), {}}};
  };
  return d;
}

PX_REGISTER_OP(batched_matmul, make());

}  // namespace
}  // namespace px::ops
