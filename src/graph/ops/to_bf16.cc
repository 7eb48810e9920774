// to_bf16: y = x rounded to bf16 (to nearest even), stored in 2 bytes.
//   x F32[...] -> y BF16[...]
// Mixed precision's storage step: the lowering inserts it after a forward
// value that only bf16 GEMMs read (graph/precision.h), so the value is kept
// for backward at half the bytes and moved between ranks at half the bytes.
// The GEMMs would round the same fp32 values themselves, so results do not
// change. Inserted after differentiation, it has no backward rule (and no
// finite-difference check: rounding is piecewise constant).
#include "graph/ops/op_util.h"
#include "kernels/bf16.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "to_bf16";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 1, 1);
    require_dtype(in[0], DType::f32, "the input");
    return std::vector<TensorSpec>{{in[0].shape, DType::bf16}};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    kernels::to_bf16(in[0]->numel(), in[0]->f32(), static_cast<kernels::bf16*>(out[0]->raw()));
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  // Any split or replication passes through; a partial sum is reduced in
  // fp32 first (rounding each summand would round the sum twice).
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return pointwise_signatures(in[0].shape.rank(), 1, 1, false);
  };
  d.examples = [] { return std::vector<OpExample>{{{f32({5, 7})}, {}, {}}, {{f32({2, 3, 13})}, {}, {}}}; };
  return d;
}

PX_REGISTER_OP(to_bf16, make());

}  // namespace
}  // namespace px::ops
