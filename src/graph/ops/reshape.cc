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
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    std::vector<PlacementSignature> s{{"replicated", {Placement::B()}, {Placement::B()}},
                                      {"partial", {Placement::P()}, {Placement::P()}}};
    const auto& target = a.get_ints("shape");
    const Shape& x = in[0].shape;
    if (!target.empty() && target[0] == -1 && x.rank() > 0) {
      int64_t rest = 1;
      for (size_t i = 1; i < target.size(); ++i) rest *= target[i];
      if (rest == x.numel(1, x.rank())) s.push_back({"batch_split", {Placement::S(0)}, {Placement::S(0)}});
    }
    return s;
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
