// Mixture-of-experts kernels: the router's top-k choice with capacity, its
// gradient, the experts' rows grouped for one GEMM each, and the two
// balancing losses. Legend:
//   N  rows routed (tokens)      E  experts      k  experts per token
//   R  rows of expert work (a token's k copies: N*k)
// A choice an expert's capacity dropped is stored as -1-e (e the expert it
// chose), so the choice is still known to the gradient and the metrics,
// and every consumer skips it as "negative: no expert".
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace px::kernels {

// Expert index of a stored choice, or -1 where capacity dropped it.
inline int32_t routed_expert(int32_t choice) { return choice < 0 ? -1 : choice; }
// The expert chosen, dropped or not.
inline int32_t chosen_expert(int32_t choice) { return choice < 0 ? -1 - choice : choice; }

struct RouteShape {
  int64_t rows = 0, experts = 0, k = 1;
  // Most choices each expert takes; 0: no limit (dropless). Choices are
  // admitted by rank first (every token's first choice, then every
  // token's second, ...), by token order within a rank, as Switch and
  // GShard do, so a token's first choice is dropped last.
  int64_t capacity = 0;
  // Gates renormalised over the k chosen (Mixtral, GShard top-2) or the
  // plain softmax probabilities (Switch top-1).
  bool normalize = true;
};

// The router's logits (N, E) = x (N, C) · w (C, E) in fp32, each row's
// sums in one fixed order: a row's logits are the same bits whatever other
// rows are computed with it, so routing does not depend on how a strategy
// splits the batch (a BLAS GEMM may block rows differently per size).
void moe_router_logits(int64_t rows, int64_t in, int64_t experts, const float* x, const float* w, float* logits);

// logits (N, E) fp32 -> choice (N, k): the k experts of largest softmax
// probability + bias (bias (E) or null: it steers the choice only,
// DeepSeek-V3's balancing), ties to the lower index, dropped ones stored
// -1-e; gates (N, k) = the chosen probs / their sum (normalize) or the
// probs; counts (E) += choices per expert before dropping.
void moe_route(const RouteShape& shape, const float* logits, const float* bias, int32_t* choice, float* gates,
               float* counts);
// The gradient of the gates with respect to the logits, (N, E). Dropped
// choices still carry their gate's gradient (the experts gave them zero,
// so it is zero unless the caller adds one).
void moe_route_backward(const RouteShape& shape, const float* logits, const int32_t* choice, const float* gates,
                        const float* dgates, float* dlogits);

// Switch's load-balancing loss over rows of logits: sum_n sum_e f_e *
// softmax(logits_n)_e, f (E) the experts' shares of the choices; and its
// gradient scale * p * (f - <p, f>) per row.
double moe_balance_loss(int64_t rows, int64_t experts, const float* logits, const float* share);
void moe_balance_loss_backward(int64_t rows, int64_t experts, const float* logits, const float* share, float scale,
                               float* dlogits);

// Rows grouped by expert: rows[offset[e] .. offset[e+1]) are the rows
// whose choice is expert e (dropped rows are in no group), in row order.
struct ExpertRows {
  std::vector<int64_t> offset;  // E + 1
  std::vector<int64_t> rows;
  // rows[i] == i for every row: all routed, already grouped by expert (as
  // a routed exchange delivers them), so a group is a contiguous block of
  // rows and needs no gather or scatter.
  bool in_place = false;
  int64_t count(int64_t expert) const {
    return offset[static_cast<size_t>(expert + 1)] - offset[static_cast<size_t>(expert)];
  }
  int64_t largest() const;  // the most rows any expert got
};
ExpertRows group_rows_by_expert(int64_t rows, int64_t experts, const int32_t* choice);

// Copies rows `rows[i]` of src (row width `width`) to row i of dst, and back.
void gather_rows(const std::vector<int64_t>& rows, int64_t begin, int64_t end, int64_t width, const float* src,
                 float* dst);
void scatter_rows(const std::vector<int64_t>& rows, int64_t begin, int64_t end, int64_t width, const float* src,
                  float* dst);

namespace ref {
// Each row through its expert's weight, one dot product at a time:
// y (R, Q) = x (R, P) · w[e] (P, Q), or with trans x (R, Q) · w[e]ᵀ -> (R, P),
// w (E, P, Q); rows with no expert get zeros. The fast path is the op's
// (graph/ops/moe_linear.cc: one GEMM per expert over its gathered rows).
void moe_linear(int64_t rows, int64_t experts, int64_t P, int64_t Q, bool trans, const float* x, const float* w,
                const int32_t* choice, float* y);
}  // namespace ref

// Router z-loss (ST-MoE): sum over rows of logsumexp(logits)^2, and its
// gradient dlogits = scale * 2 * lse * softmax.
double moe_z_loss(int64_t rows, int64_t experts, const float* logits);
void moe_z_loss_backward(int64_t rows, int64_t experts, const float* logits, float scale, float* dlogits);

}  // namespace px::kernels
