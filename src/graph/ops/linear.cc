// linear: y = x · w + b (GPT-2 Conv1D layout: w is (in, out)).
//   x (M..., K), w (K, N), b (N) optional -> y (M..., N)
#include "graph/ops/op_util.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "linear";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 3);
    const Shape &x = in[0].shape, &w = in[1].shape;
    require(x.rank() >= 1 && w.rank() == 2, "x must have rank >= 1 and weight rank 2, got {} and {}", x, w);
    require(x[-1] == w[0], "x {} has {} features but weight {} expects {}", x, x[-1], w, w[0]);
    if (in.size() == 3)
      require(in[2].shape == Shape({w[1]}), "bias {} must be [{}]", in[2].shape, w[1]);
    return std::vector<TensorSpec>{f32(with_last(x, w[1]))};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    int64_t K = in[1]->dim(0), N = in[1]->dim(1), M = rows_of(in[0]->shape());
    kernels::gemm(false, false, M, N, K, 1.0f, in[0]->f32(), K, in[1]->f32(), N, 0.0f,
                  out[0]->f32(), N);
    if (in.size() == 3) kernels::add_bias(M, N, in[2]->f32(), out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    ValueId x = n.inputs[0], w = n.inputs[1], dy = dout[0];
    std::vector<ValueId> grads{
        g.add1("matmul", {dy, w}, {{"trans_b", int64_t{1}}}, n.name + ".grad_x"),
        g.add1("matmul_at_b", {x, dy}, {}, n.name + ".grad_w")};
    if (n.inputs.size() == 3)
      grads.push_back(g.add1("sum_leading", {dy}, {{"keep", int64_t{1}}}, n.name + ".grad_b"));
    return grads;
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = 2.0 * double(out[0].shape.numel()) * double(in[0].shape[-1]);
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    int r = in[0].shape.rank();
    bool bias = in.size() == 3;
    auto sig = [&](std::string name, Placement x, Placement w, Placement b, Placement y) {
      PlacementSignature s{std::move(name), {x, w}, {y}};
      if (bias) s.inputs.push_back(b);
      return s;
    };
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < r - 1; ++dim)
      s.push_back(sig(fmt::format("data_parallel_{}", dim), Placement::S(dim), Placement::B(),
                      Placement::B(), Placement::S(dim)));
    s.push_back(sig("column_parallel", Placement::B(), Placement::S(1), Placement::S(0), Placement::S(r - 1)));
    // Row parallel: each shard adds a summand of the bias (one shard holds it, the others zero).
    s.push_back(sig("row_parallel", Placement::S(r - 1), Placement::S(0), Placement::P(), Placement::P()));
    s.push_back(sig("replicated", Placement::B(), Placement::B(), Placement::B(), Placement::B()));
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 5, 7}), f32({7, 4}), f32({4})}, {}, {}},
                                  {{f32({13, 6}), f32({6, 5})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(linear, make());

}  // namespace
}  // namespace px::ops
