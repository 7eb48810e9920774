// add: out = a + b, same shapes. Residual connections and gradient sums.
#include "graph/ops/op_util.h"
#include "kernels/elementwise.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "add";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require(in[0].shape == in[1].shape, "shapes must match: {} vs {}", in[0].shape, in[1].shape);
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    kernels::add(in[0]->numel(), in[0]->f32(), in[1]->f32(), out[0]->f32());
  };
  d.backward = [](Graph&, const Node&, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{dout[0], dout[0]};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return pointwise_signatures(in[0].shape.rank(), 2, 1, /*linear=*/true);
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({6, 5}), f32({6, 5})}, {}, {}},
                                  {{f32({7, 3, 2}), f32({7, 3, 2})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(add, make());

}  // namespace
}  // namespace px::ops
