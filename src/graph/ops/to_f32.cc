// to_f32: y = x as float32, of integers (int32 or int64) — an imported
// Cast of integer data to float: class labels read as numbers by a
// regression's loss (((y_hat - y.float()) ** 2).mean()).
//   x I32|I64[...] -> y F32[...]
// Integers carry no gradient, so it has no backward rule (autodiff never
// reaches it from a parameter). Exact for |x| < 2^24. Elementwise: any
// split or replication passes through.
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

OpDef make() {
  OpDef d;
  d.name = "to_f32";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 1, 1);
    require(in[0].dtype == DType::i32 || in[0].dtype == DType::i64, "x must be i32 or i64, got {}",
            dtype_name(in[0].dtype));
    return std::vector<TensorSpec>{f32(in[0].shape)};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t n = in[0]->numel();
    float* y = out[0]->f32();
    if (in[0]->dtype() == DType::i32) {
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
