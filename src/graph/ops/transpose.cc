// transpose: y = x with its dims permuted, y.dim(i) = x.dim(perm[i])
// (attrs perm), e.g. attention's heads (B, T, H, D) -> (B, H, T, D) with
// perm [0, 2, 1, 3], or a torch Linear's (out, in) weight read as (in, out).
// Backward: the inverse permutation of dy. A split moves with its dim.
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

std::vector<int64_t> inverse(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return inv;
}

OpDef make() {
  OpDef d;
  d.name = "transpose";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "x");
    const std::vector<int64_t>& perm = a.get_ints("perm");
    const Shape& x = in[0].shape;
    require(static_cast<int>(perm.size()) == x.rank(), "perm has {} entries for x of rank {}", perm.size(), x.rank());
    std::vector<bool> seen(perm.size(), false);
    std::vector<int64_t> dims;
    for (int64_t p : perm) {
      require(p >= 0 && p < x.rank() && !seen[static_cast<size_t>(p)], "perm [{}] is not a permutation",
              fmt::join(perm, ","));
      seen[static_cast<size_t>(p)] = true;
      dims.push_back(x[static_cast<int>(p)]);
    }
    return std::vector<TensorSpec>{{Shape(dims), in[0].dtype}};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const std::vector<int64_t>& perm = a.get_ints("perm");
    const Shape &xs = in[0]->shape(), &ys = out[0]->shape();
    const int rank = xs.rank();
    std::vector<int64_t> x_stride(rank, 1), y_index(rank, 0);
    for (int k = rank - 2; k >= 0; --k) x_stride[k] = x_stride[k + 1] * xs[k + 1];
    const float* x = in[0]->f32();
    float* y = out[0]->f32();
    // Walks y in order, keeping y's multi-index and the matching x offset.
    int64_t offset = 0;
    for (int64_t j = 0, n = out[0]->numel(); j < n; ++j) {
      y[j] = x[offset];
      for (int k = rank - 1; k >= 0; --k) {
        offset += x_stride[perm[k]];
        if (++y_index[k] < ys[k]) break;
        offset -= x_stride[perm[k]] * ys[k];
        y_index[k] = 0;
      }
    }
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{
        g.add1("transpose", {dout[0]}, {{"perm", inverse(n.attrs.get_ints("perm"))}}, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs& a) {
    const std::vector<int64_t>& perm = a.get_ints("perm");
    std::vector<PlacementSignature> s{{"replicated", {Placement::B()}, {Placement::B()}},
                                      {"partial", {Placement::P()}, {Placement::P()}}};
    for (size_t i = 0; i < perm.size(); ++i)
      s.push_back({fmt::format("split_{}", perm[i]), {Placement::S(static_cast<int>(perm[i]))},
                   {Placement::S(static_cast<int>(i))}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({5, 3})}, {{"perm", std::vector<int64_t>{1, 0}}}, {}},
                                  {{f32({2, 5, 3, 4})}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}, {}},
                                  {{f32({2, 3, 4})}, {{"perm", std::vector<int64_t>{2, 0, 1}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(transpose, make());

}  // namespace
}  // namespace px::ops
