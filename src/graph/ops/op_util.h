// Helpers shared by op definitions: shape checks that throw px::Error with
// the op's own words, and the signature families most ops share.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "graph/graph.h"
#include "graph/op.h"
#include "kernels/gemm_bf16.h"

namespace px::ops {

inline TensorSpec f32(Shape shape) { return {std::move(shape), DType::f32}; }

// Throws px::Error(message) if !ok. The graph prefixes the node's name and inputs.
template <typename... Args>
void require(bool ok, fmt::format_string<Args...> format, Args&&... args) {
  if (!ok) fail(format, std::forward<Args>(args)...);
}

void require_count(const std::vector<TensorSpec>& in, size_t lo, size_t hi);
void require_dtype(const TensorSpec& s, DType dtype, const char* what);

// Shape with its last dim replaced.
Shape with_last(const Shape& s, int64_t last);
// Product of all dims but the last (the "rows" of a [..., C] tensor).
int64_t rows_of(const Shape& s);

// A bf16 node's operand as the mixed-precision kernels take it: an fp32
// tensor (rounded as it is read) or one stored in bf16. Rows `ld` apart.
kernels::Bf16Operand bf16_operand(const Tensor& t, int64_t ld = 0);

// C = op(A) · op(B) by kernels::gemm, or, when the node's precision is bf16
// (graph/precision.h), by kernels::gemm_mixed_bf16: the GEMM ops' one call
// site for both. A and B are fp32 tensors, or under bf16 either may be a
// value the lowering stores in bf16 (store_gemm_operands_in_bf16).
void gemm(const Attrs& attrs, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const Tensor& A,
          int64_t lda, const Tensor& B, int64_t ldb, float* C, int64_t ldc);

// `batch` products C_i = op(A_i) · op(B_i), A_i, B_i and C_i `stride_*`
// elements apart: kernels::gemm_batched, or gemm_batched_mixed_bf16 when
// the node's precision is bf16 (operands fp32 or stored in bf16).
void gemm_batched(const Attrs& attrs, int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  const Tensor& A, int64_t lda, int64_t stride_a, const Tensor& B, int64_t ldb, int64_t stride_b,
                  float* C, int64_t ldc, int64_t stride_c);

// Pointwise ops over n same-shape inputs: S(d) for every d, and B; plus
// all-P -> P when the op is linear in its inputs (add).
std::vector<PlacementSignature> pointwise_signatures(int rank, size_t n_inputs, size_t n_outputs,
                                                     bool linear);

}  // namespace px::ops

namespace px::ops {

// A pointwise op over n same-shape f32 inputs with one same-shape output;
// `kernel(n, inputs, out)` does the work. Signatures: every split, B, and
// (when `linear_in_last` is set) P in the last input with B elsewhere — for
// gradient ops linear in the incoming gradient.
OpDef pointwise_op(std::string name, size_t n_inputs,
                   std::function<void(int64_t, const std::vector<const float*>&, float*)> kernel,
                   double flops_per_element, bool linear_in_last);

}  // namespace px::ops
