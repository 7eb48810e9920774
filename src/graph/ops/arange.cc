// arange: the integers 0..n-1, e.g. GPT's positions for the wpe lookup.
//   () -> y (n) i32          attrs: n
// A graph computes its own positions with it, so the runtime binds only the
// batch (tokens, targets). Not differentiable. Its only signature is B: with
// no input it has no shard offset to start from; a consumer that wants the
// positions split gets them by the free B -> S(d) slice.
#include <limits>

#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "arange";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 0, 0);
    const int64_t n = a.get_int("n");
    require(n >= 0 && n <= std::numeric_limits<int32_t>::max(), "n={} must be in [0, 2^31)", n);
    return std::vector<TensorSpec>{{Shape{n}, DType::i32}};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>&,
                 const std::vector<Tensor*>& out) {
    int32_t* y = out[0]->data<int32_t>();
    for (int64_t i = 0; i < out[0]->numel(); ++i) y[i] = static_cast<int32_t>(i);
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>&, const Attrs&) {
    return std::vector<PlacementSignature>{{"replicated", {}, {Placement::B()}}};
  };
  d.examples = [] {
    return std::vector<OpExample>{{{}, {{"n", int64_t{7}}}, {}}, {{}, {{"n", int64_t{1}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(arange, make());

}  // namespace
}  // namespace px::ops
