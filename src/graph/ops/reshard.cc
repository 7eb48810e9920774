// reshard: a value changing placement along one mesh axis (the one rule of
// parallel/lower/reshard.h). Lowering inserts these nodes where a
// producer's placement differs from what a consumer needs; the executor
// runs each as a collective over the axis (the graph itself knows nothing
// of ranks, so the node has no kernel).
//   x -> y, same dtype; attrs: axis, from, to (placements), shape (y's shape:
//   the global one, the shard's after localize)
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "reshard";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    Shape shape(a.get_ints("shape"));
    require(shape.numel() > 0 || in[0].shape.numel() == 0, "reshard to an empty shape {}", shape);
    return std::vector<TensorSpec>{{shape, in[0].dtype}};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>&, const std::vector<Tensor*>&) {
    fail("reshard {} -> {} along mesh axis {} is a collective: the program executor runs it, not a kernel",
         a.get_string("from"), a.get_string("to"), a.get_int("axis"));
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 0); };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs&) { return std::vector<PlacementSignature>{}; };
  d.localize = [](const Attrs& a, const std::vector<TensorSpec>&, const std::vector<TensorSpec>& out) {
    Attrs local = a;
    local.set("shape", out[0].shape.dims());
    return local;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({4, 3})},
                                   {{"axis", int64_t{0}}, {"from", std::string("P")}, {"to", std::string("B")},
                                    {"shape", std::vector<int64_t>{4, 3}}},
                                   {}}};
  };
  return d;
}

PX_REGISTER_OP(reshard, make());

}  // namespace
}  // namespace px::ops
