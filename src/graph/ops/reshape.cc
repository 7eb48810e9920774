// reshape: a view of x with a new shape of equal size.  attrs: shape, where
// one entry may be -1 (inferred). Write the batch dim as -1 so the node is
// unchanged on a batch-split shard: [B,T,3C] -> [-1, T, 3, H, D].
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

Shape resolve(const Shape& x, const std::vector<int64_t>& target) {
  std::vector<int64_t> dims = target;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      require(infer < 0, "shape {} has more than one -1", Shape(target));
      infer = static_cast<int>(i);
    } else {
      require(dims[i] >= 0, "shape {} has a negative dim", Shape(target));
      known *= dims[i];
    }
  }
  if (infer >= 0) {
    require(known > 0 && x.numel() % known == 0, "cannot infer -1 in {} from {} elements", Shape(target),
            x.numel());
    dims[infer] = x.numel() / known;
  }
  require(Shape(dims).numel() == x.numel(), "cannot view {} ({} elements) as {}", x, x.numel(), Shape(dims));
  return Shape(dims);
}

// Splits that survive the view. The dims of x and y fall into groups of
// equal size (a dim kept, one dim split into several, several merged into
// one). A kept dim keeps its split. Where x's dim i becomes y's dims
// (n0, n1, ..., nk), splitting y's dim j is splitting dim i seen as
// n0·…·n(j-1) groups (S(i, groups)), and conversely for a merge; unless j
// is the last of its group, a block must hold whole units of the dims
// after j, so the signature needs an even split.
std::vector<PlacementSignature> reshape_signatures(const Shape& x, const Shape& y) {
  std::vector<PlacementSignature> s{{"replicated", {Placement::B()}, {Placement::B()}},
                                    {"partial", {Placement::P()}, {Placement::P()}}};
  int i = 0, j = 0;
  while (i < x.rank() && j < y.rank()) {
    const int i0 = i, j0 = j;
    int64_t px = x[i++], py = y[j++];
    while (px != py) {
      if (px < py && i < x.rank()) px *= x[i++];
      else if (py < px && j < y.rank()) py *= y[j++];
      else return s;
    }
    auto product = [](const Shape& shape, int from, int to) {
      int64_t p = 1;
      for (int d = from; d < to; ++d) p *= shape[d];
      return p;
    };
    if (i - i0 == 1 && j - j0 == 1) {
      s.push_back({fmt::format("split_{}", i0), {Placement::S(i0)}, {Placement::S(j0)}});
    } else if (i - i0 == 1) {
      for (int o = j0; o < j; ++o)
        if (y[o] > 1)
          s.push_back({fmt::format("split_{}_as_{}", i0, o), {Placement::S(i0, static_cast<int>(product(y, j0, o)))},
                       {Placement::S(o)}, product(y, o + 1, j) > 1});
    } else if (j - j0 == 1) {
      for (int d = i0; d < i; ++d)
        if (x[d] > 1)
          s.push_back({fmt::format("split_{}_as_{}", d, j0), {Placement::S(d)},
                       {Placement::S(j0, static_cast<int>(product(x, i0, d)))}, product(x, d + 1, i) > 1});
    }
  }
  return s;
}

OpDef make() {
  OpDef d;
  d.name = "reshape";
  d.output_is_view = true;
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    return std::vector<TensorSpec>{{resolve(in[0].shape, a.get_ints("shape")), in[0].dtype}};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>&,
                 const std::vector<Tensor*>&) {};  // the executor binds the view
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    std::vector<int64_t> dims = g.spec(n.inputs[0]).shape.dims();
    if (!dims.empty() && n.attrs.get_ints("shape").size() > 0 && n.attrs.get_ints("shape")[0] == -1) dims[0] = -1;
    return std::vector<ValueId>{g.add1("reshape", {dout[0]}, {{"shape", dims}}, n.name + ".grad")};
  };
  d.cost = [](const auto&, const auto&, const Attrs&) { return OpCost{}; };
  d.signatures_see_groups = true;
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    return reshape_signatures(in[0].shape, resolve(in[0].shape, a.get_ints("shape")));
  };
  // On a shard the target is the shard's own shape (the batch dim stays -1).
  d.localize = [](const Attrs& a, const std::vector<TensorSpec>&, const std::vector<TensorSpec>& out) {
    std::vector<int64_t> dims = out[0].shape.dims();
    if (!dims.empty() && !a.get_ints("shape").empty() && a.get_ints("shape")[0] == -1) dims[0] = -1;
    Attrs local = a;
    local.set("shape", dims);
    return local;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({6, 4, 6})}, {{"shape", std::vector<int64_t>{-1, 4, 3, 2}}}, {}},
                                  {{f32({5, 2, 3})}, {{"shape", std::vector<int64_t>{-1, 6}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(reshape, make());

}  // namespace
}  // namespace px::ops
