#include "graph/ops/op_util.h"

#include "graph/precision.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"

namespace px::ops {

kernels::Bf16Operand bf16_operand(const Tensor& t, int64_t ld) {
  if (t.dtype() == DType::bf16) return {.rounded = static_cast<const kernels::bf16*>(t.raw()), .ld = ld};
  return {.f32 = t.f32(), .ld = ld};
}

void gemm(const Attrs& attrs, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const Tensor& A,
          int64_t lda, const Tensor& B, int64_t ldb, float* C, int64_t ldc) {
  if (precision_of(attrs) == Precision::bf16)
    return kernels::gemm_mixed_bf16(trans_a, trans_b, M, N, K, 1.0f, bf16_operand(A, lda), bf16_operand(B, ldb), 0.0f, C,
                                    ldc);
  // f32() checks the dtype: a bf16 operand reaches only a bf16 node.
  kernels::gemm(trans_a, trans_b, M, N, K, 1.0f, A.f32(), lda, B.f32(), ldb, 0.0f, C, ldc);
}

void gemm_batched(const Attrs& attrs, int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  const Tensor& A, int64_t lda, int64_t stride_a, const Tensor& B, int64_t ldb, int64_t stride_b,
                  float* C, int64_t ldc, int64_t stride_c) {
  if (precision_of(attrs) == Precision::bf16)
    return kernels::gemm_batched_mixed_bf16(batch, trans_a, trans_b, M, N, K, 1.0f, bf16_operand(A, lda), stride_a,
                                            bf16_operand(B, ldb), stride_b, 0.0f, C, ldc, stride_c);
  kernels::gemm_batched(batch, trans_a, trans_b, M, N, K, 1.0f, A.f32(), lda, stride_a, B.f32(), ldb, stride_b, 0.0f,
                        C, ldc, stride_c);
}

void require_count(const std::vector<TensorSpec>& in, size_t lo, size_t hi) {
  if (in.size() < lo || in.size() > hi) {
    if (lo == hi) fail("expected {} inputs, got {}", lo, in.size());
    fail("expected {} to {} inputs, got {}", lo, hi, in.size());
  }
}

void require_dtype(const TensorSpec& s, DType dtype, const char* what) {
  if (s.dtype != dtype) fail("{} must be {}, got {}", what, dtype_name(dtype), dtype_name(s.dtype));
}

Shape with_last(const Shape& s, int64_t last) {
  std::vector<int64_t> d = s.dims();
  d.back() = last;
  return Shape(d);
}

int64_t rows_of(const Shape& s) { return s.numel(0, s.rank() - 1); }

std::vector<PlacementSignature> pointwise_signatures(int rank, size_t n_inputs, size_t n_outputs,
                                                     bool linear) {
  std::vector<PlacementSignature> out;
  for (int d = 0; d < rank; ++d)
    out.push_back({fmt::format("split_{}", d), std::vector<Placement>(n_inputs, Placement::S(d)),
                   std::vector<Placement>(n_outputs, Placement::S(d))});
  out.push_back({"replicated", std::vector<Placement>(n_inputs, Placement::B()),
                 std::vector<Placement>(n_outputs, Placement::B())});
  if (linear)
    out.push_back({"partial", std::vector<Placement>(n_inputs, Placement::P()),
                   std::vector<Placement>(n_outputs, Placement::P())});
  return out;
}

}  // namespace px::ops

namespace px::ops {

OpDef pointwise_op(std::string name, size_t n_inputs,
                   std::function<void(int64_t, const std::vector<const float*>&, float*)> kernel,
                   double flops_per_element, bool linear_in_last) {
  OpDef d;
  d.name = std::move(name);
  d.infer = [n_inputs](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, n_inputs, n_inputs);
    for (const auto& s : in) {
      require_dtype(s, DType::f32, "every input");
      require(s.shape == in[0].shape, "shapes must match: {} vs {}", s.shape, in[0].shape);
    }
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [kernel](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                       const std::vector<Tensor*>& out) {
    std::vector<const float*> ptrs;
    for (const Tensor* t : in) ptrs.push_back(t->f32());
    kernel(out[0]->numel(), ptrs, out[0]->f32());
  };
  d.cost = [flops_per_element](const auto& in, const auto& out, const Attrs&) {
    return streaming_cost(in, out, flops_per_element);
  };
  d.signatures = [n_inputs, linear_in_last](const std::vector<TensorSpec>& in, const Attrs&) {
    auto s = pointwise_signatures(in[0].shape.rank(), n_inputs, 1, false);
    if (linear_in_last) {
      std::vector<Placement> ps(n_inputs, Placement::B());
      ps.back() = Placement::P();
      s.push_back({"partial_grad", ps, {Placement::P()}});
    }
    return s;
  };
  d.examples = [n_inputs] {
    return std::vector<OpExample>{{std::vector<TensorSpec>(n_inputs, f32({5, 7})), {}, {}},
                                  {std::vector<TensorSpec>(n_inputs, f32({2, 3, 13})), {}, {}}};
  };
  return d;
}

}  // namespace px::ops
