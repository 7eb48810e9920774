// to_f32: y = x as float32, of integers (int32 or int64) or of bf16.
//   x I32|I64|BF16[...] -> y F32[...]
// Of integers, an imported Cast of integer data to float: class labels read
// as numbers by a regression's loss (((y_hat - y.float()) ** 2).mean());
// exact for |x| < 2^24, and integers carry no gradient. Of bf16 (exact),
// the widening after a tensor-parallel partial sum reduced in bf16
// (parallel/lower/propagate.h), inserted after differentiation. So it has
// no backward rule. Elementwise: any split or replication passes through.
#include "graph/ops/op_util.h"
#include "kernels/bf16.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "to_f32";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 1, 1);
    require(in[0].dtype == DType::i32 || in[0].dtype == DType::i64 || in[0].dtype == DType::bf16,
            "x must be i32, i64 or bf16, got {}", dtype_name(in[0].dtype));
    return std::vector<TensorSpec>{f32(in[0].shape)};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t n = in[0]->numel();
    float* y = out[0]->f32();
    if (in[0]->dtype() == DType::bf16) {
      kernels::to_float(n, static_cast<const kernels::bf16*>(in[0]->raw()), y);
    } else if (in[0]->dtype() == DType::i32) {
      const int32_t* x = in[0]->data<int32_t>();
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
    } else {
      const int64_t* x = in[0]->data<int64_t>();
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
    }
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return pointwise_signatures(in[0].shape.rank(), 1, 1, false);
  };
  d.examples = [] {
    return std::vector<OpExample>{{{{Shape({6}), DType::i32}}, {}, {10}},
                                  {{{Shape({3, 5}), DType::i64}}, {}, {1000}}};
  };
  return d;
}

PX_REGISTER_OP(to_f32, make());

}  // namespace
}  // namespace px::ops
