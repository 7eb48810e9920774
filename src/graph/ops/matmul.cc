// matmul: y = a · b, or a · b^T with trans_b.  Leading dims of a are rows.
//   a (M..., K), b (K, N) [or (N, K) with trans_b=1] -> y (M..., N)
// The tied GPT LM head is matmul(h, wte, trans_b=1).
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "matmul";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 2);
    bool tb = a.get_int("trans_b", 0) != 0;
    const Shape &x = in[0].shape, &w = in[1].shape;
    require(x.rank() >= 1 && w.rank() == 2, "a must have rank >= 1 and b rank 2");
    int64_t K = tb ? w[1] : w[0], N = tb ? w[0] : w[1];
    require(x[-1] == K, "inner dims differ: a {} has K={}, b {} has K={}{}", x, x[-1], w, K,
            tb ? " (b transposed)" : "");
    return std::vector<TensorSpec>{f32(with_last(x, N))};
  };
  d.mixed_precision = true;
  d.bf16_gemm = true;
  d.bf16_inputs = {0, 1};
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    bool tb = a.get_int("trans_b", 0) != 0;
    int64_t K = in[0]->shape()[-1], N = out[0]->shape()[-1], M = rows_of(in[0]->shape());
    gemm(a, false, tb, M, N, K, *in[0], K, *in[1], tb ? K : N, out[0]->f32(), N);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    bool tb = n.attrs.get_int("trans_b", 0) != 0;
    ValueId a = n.inputs[0], b = n.inputs[1], dy = dout[0];
    ValueId da = g.add1("matmul", {dy, b}, {{"trans_b", int64_t{tb ? 0 : 1}}}, n.name + ".grad_a");
    ValueId db = tb ? g.add1("matmul_at_b", {dy, a}, {}, n.name + ".grad_b")
                    : g.add1("matmul_at_b", {a, dy}, {}, n.name + ".grad_b");
    return std::vector<ValueId>{da, db};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = 2.0 * double(out[0].shape.numel()) * double(in[0].shape[-1]);
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    bool tb = a.get_int("trans_b", 0) != 0;
    int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < r - 1; ++dim)
      s.push_back({fmt::format("data_parallel_{}", dim), {Placement::S(dim), Placement::B()},
                   {Placement::S(dim)}});
    s.push_back({"column_parallel", {Placement::B(), Placement::S(tb ? 0 : 1)}, {Placement::S(r - 1)}});
    s.push_back({"row_parallel", {Placement::S(r - 1), Placement::S(tb ? 1 : 0)}, {Placement::P()}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    s.push_back({"partial_a", {Placement::P(), Placement::B()}, {Placement::P()}});
    s.push_back({"partial_b", {Placement::B(), Placement::P()}, {Placement::P()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 5, 7}), f32({7, 4})}, {}, {}},
                                  {{f32({6, 5}), f32({3, 5})}, {{"trans_b", int64_t{1}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(matmul, make());

}  // namespace
}  // namespace px::ops
