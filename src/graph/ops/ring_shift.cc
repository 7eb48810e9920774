// ring_shift: the blocks of a blocked tensor (graph/ops/seq_blocks.cc)
// rotated by `step` along dim 1: y[:, p] = x[:, (p - step) mod P]. Context
// parallelism's ring passes key/value blocks on with it (step 1) and their
// gradients back (step -1, its gradient).
//   ring_shift: x (B, P, L, Z...) -> y (B, P, L, Z...)
// Split along dim 1 over P ranks (one block each), the ranks exchange their
// blocks: that signature is marked `exchanges`, and the lowering emits the
// send to the next rank and the receive from the previous one
// (parallel/lower/schedule.cc); the kernel only ever rotates the blocks a
// rank holds whole.
#include <cstring>

#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make_ring_shift() {
  OpDef d;
  d.name = "ring_shift";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "x");
    require(in[0].shape.rank() >= 3, "x must be blocked (B, P, L, ...), got {}", in[0].shape);
    require(a.get_int("step") == 1 || a.get_int("step") == -1, "step {} must be 1 or -1", a.get_int("step"));
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Shape& x = in[0]->shape();
    const int64_t P = x[1], block = x.numel(2, x.rank()), step = a.get_int("step");
    for (int64_t b = 0; b < x[0]; ++b)
      for (int64_t p = 0; p < P; ++p) {
        const int64_t from = ((p - step) % P + P) % P;
        std::memcpy(out[0]->f32() + (b * P + p) * block, in[0]->f32() + (b * P + from) * block,
                    static_cast<size_t>(block) * sizeof(float));
      }
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{
        g.add1("ring_shift", {dout[0]}, {{"step", -n.attrs.get_int("step")}}, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s{{"replicated", {Placement::B()}, {Placement::B()}},
                                      {"partial", {Placement::P()}, {Placement::P()}}};
    for (int dim = 0; dim < in[0].shape.rank(); ++dim) {
      if (dim == 1) continue;
      s.push_back({fmt::format("split_{}", dim), {Placement::S(dim)}, {Placement::S(dim)}});
    }
    PlacementSignature ring{"ring", {Placement::S(1)}, {Placement::S(1)}};
    ring.ranks = static_cast<int>(in[0].shape[1]);
    ring.exchanges = true;
    s.push_back(ring);
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({2, 3, 2, 4})}, {{"step", int64_t{1}}}, {}},
                                  {{f32({1, 4, 3, 2})}, {{"step", int64_t{-1}}}, {}}};
  };
  return d;
}

PX_REGISTER_OP(ring_shift, make_ring_shift());

}  // namespace
}  // namespace px::ops
