// concat: the inputs joined along one dim (attr dim), y = [x0 | x1 | ...]
// — an imported Concat of computed values. Backward: each input's block of
// dy (a narrow). Any other dim may be split (every input alike); linear,
// so partial inputs give a partial output.
//   x_i (A..., S_i, Z...) -> y (A..., sum S_i, Z...)
#include <cstring>

#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make_concat() {
  OpDef d;
  d.name = "concat";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 64);
    const int64_t dim = a.get_int("dim");
    const Shape& first = in[0].shape;
    require(dim >= 0 && dim < first.rank(), "dim {} outside rank {}", dim, first.rank());
    std::vector<int64_t> y = first.dims();
    y[static_cast<size_t>(dim)] = 0;
    for (const TensorSpec& s : in) {
      require_dtype(s, DType::f32, "every input");
      require(s.shape.rank() == first.rank(), "inputs of ranks {} and {}", first.rank(), s.shape.rank());
      for (int k = 0; k < first.rank(); ++k)
        require(k == dim || s.shape[k] == first[k], "shapes {} and {} differ outside dim {}", first, s.shape, dim);
      y[static_cast<size_t>(dim)] += s.shape[static_cast<int>(dim)];
    }
    return std::vector<TensorSpec>{f32(Shape(y))};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int dim = static_cast<int>(a.get_int("dim"));
    const Shape& y = out[0]->shape();
    const int64_t outer = y.numel(0, dim), inner = y.numel(dim + 1, y.rank()), extent = y[dim];
    int64_t at = 0;  // this input's first index along dim
    for (const Tensor* x : in) {
      const int64_t length = x->shape()[dim];
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(out[0]->f32() + (o * extent + at) * inner, x->f32() + o * length * inner,
                    static_cast<size_t>(length * inner) * sizeof(float));
      at += length;
    }
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const int64_t dim = n.attrs.get_int("dim");
    std::vector<ValueId> dx;
    int64_t at = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int64_t length = g.spec(n.inputs[i]).shape[static_cast<int>(dim)];
      dx.push_back(g.add1("narrow", {dout[0]}, {{"dim", dim}, {"start", at}, {"length", length}},
                          fmt::format("{}.grad{}", n.name, i)));
      at += length;
    }
    return dx;
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 0); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    const size_t n = in.size();
    const int dim = static_cast<int>(a.get_int("dim"));
    std::vector<PlacementSignature> s{{"replicated", std::vector<Placement>(n, Placement::B()), {Placement::B()}},
                                      {"partial", std::vector<Placement>(n, Placement::P()), {Placement::P()}}};
    for (int k = 0; k < in[0].shape.rank(); ++k)
      if (k != dim)
        s.push_back({fmt::format("split_{}", k), std::vector<Placement>(n, Placement::S(k)), {Placement::S(k)}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 4}), f32({3, 2})}, {{"dim", int64_t{1}}}, {}},
                                  {{f32({2, 3, 4}), f32({2, 1, 4}), f32({2, 2, 4})}, {{"dim", int64_t{1}}}, {}},
                                  {{f32({2, 5}), f32({4, 5})}, {{"dim", int64_t{0}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(concat, make_concat());

}  // namespace
}  // namespace px::ops
