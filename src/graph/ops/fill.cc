// fill: a constant tensor (the loss gradient seed, 1.0). attrs: value, shape.
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "fill";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 0, 0);
    return std::vector<TensorSpec>{f32(Shape(a.get_ints("shape")))};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>&,
                 const std::vector<Tensor*>& out) {
    out[0]->fill(static_cast<float>(a.get_float("value")));
  };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs&) {
    return std::vector<PlacementSignature>{{"replicated", {}, {Placement::B()}}};
  };
  d.examples = [] {
    return std::vector<OpExample>{{{}, {{"value", 1.5}, {"shape", std::vector<int64_t>{3, 2}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(fill, make());

}  // namespace
}  // namespace px::ops
