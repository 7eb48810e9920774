// softmax over the last dim (see kernels/softmax.h): attention weights in
// imported graphs.
//   softmax:      x (R..., C) -> y (R..., C)
//   softmax_grad: y, dy -> dx = y ⊙ (dy - Σ_c dy ⊙ y), from the saved output
// Rows are independent: any dim but the last may be split.
#include "graph/ops/op_util.h"
#include "kernels/softmax.h"

namespace px::ops {
namespace {

std::vector<PlacementSignature> row_signatures(int rank, size_t n_inputs) {
  std::vector<PlacementSignature> s;
  for (int d = 0; d + 1 < rank; ++d)
    s.push_back({fmt::format("split_{}", d), std::vector<Placement>(n_inputs, Placement::S(d)), {Placement::S(d)}});
  s.push_back({"replicated", std::vector<Placement>(n_inputs, Placement::B()), {Placement::B()}});
  return s;
}

OpDef make_softmax() {
  OpDef d;
  d.name = "softmax";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "x");
    require(in[0].shape.rank() >= 1, "x must have rank >= 1");
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    kernels::softmax(rows_of(in[0]->shape()), in[0]->shape()[-1], in[0]->f32(), out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{g.add1("softmax_grad", {n.outputs[0], dout[0]}, {}, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 5); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) { return row_signatures(in[0].shape.rank(), 1); };
  d.examples = [] { return std::vector<OpExample>{{{f32({6, 5})}, {}, {}}, {{f32({2, 3, 4, 4})}, {}, {}}}; };
  return d;
}

OpDef make_softmax_grad() {
  OpDef d;
  d.name = "softmax_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require(in[0].shape == in[1].shape, "y {} and dy {} must match", in[0].shape, in[1].shape);
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    kernels::softmax_backward(rows_of(in[0]->shape()), in[0]->shape()[-1], in[0]->f32(), in[1]->f32(),
                              out[0]->f32());
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 4); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    auto s = row_signatures(in[0].shape.rank(), 2);
    s.push_back({"partial_grad", {Placement::B(), Placement::P()}, {Placement::P()}});  // linear in dy
    return s;
  };
  d.examples = [] { return std::vector<OpExample>{{{f32({6, 5}), f32({6, 5})}, {}, {}}}; };
  return d;
}

PX_REGISTER_OP(softmax, make_softmax());
PX_REGISTER_OP(softmax_grad, make_softmax_grad());

}  // namespace
}  // namespace px::ops
