// matmul_at_b: out = a^T · c over the flattened leading (row) dims.
//   a (M..., K), c (M..., N) -> out (K, N)
// The weight gradient of matmul/linear. Split along rows (the batch) it is
// partial: each shard's product is a summand of the full one.
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "matmul_at_b";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    const Shape &a = in[0].shape, &c = in[1].shape;
    require(a.rank() == c.rank() && a.rank() >= 1, "a {} and c {} must have equal rank >= 1", a, c);
    for (int i = 0; i + 1 < a.rank(); ++i)
      require(a[i] == c[i], "leading dims differ: a {} vs c {}", a, c);
    return std::vector<TensorSpec>{f32({a[-1], c[-1]})};
  };
  d.mixed_precision = true;
  d.bf16_gemm = true;
  d.bf16_inputs = {0, 1};
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    int64_t K = in[0]->shape()[-1], N = in[1]->shape()[-1], M = rows_of(in[0]->shape());
    gemm(a, true, false, K, N, M, *in[0], K, *in[1], N, out[0]->f32(), N);
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = 2.0 * double(out[0].shape.numel()) * double(rows_of(in[0].shape));
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < r - 1; ++dim)
      s.push_back({fmt::format("reduce_split_{}", dim), {Placement::S(dim), Placement::S(dim)},
                   {Placement::P()}});
    s.push_back({"split_c_columns", {Placement::B(), Placement::S(r - 1)}, {Placement::S(1)}});
    s.push_back({"split_a_columns", {Placement::S(r - 1), Placement::B()}, {Placement::S(0)}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    s.push_back({"partial_a", {Placement::P(), Placement::B()}, {Placement::P()}});
    s.push_back({"partial_c", {Placement::B(), Placement::P()}, {Placement::P()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 5, 7}), f32({3, 5, 4})}, {}, {}},
                                  {{f32({11, 5}), f32({11, 3})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(matmul_at_b, make());

}  // namespace
}  // namespace px::ops
