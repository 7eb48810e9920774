// Multi-head self-attention on a fused q,k,v tensor, without the T x T
// matrix: the tile loop of kernels/attention_tiles.h (FlashAttention's
// schedule on a CPU) over every (batch, head). Forward keeps only the
// output and each row's log-sum-exp; backward makes the probabilities
// again tile by tile as exp(scores - lse). Memory O(B·H·T) besides the
// operands; the causal mask skips the key tiles a query tile cannot see.
// Legend: B batch, T time, H heads, D head dim (C = H*D).
//   qkv  (B, T, 3, H, D)  the GPT-2 c_attn output [B,T,3C] viewed; q,k,v at index 0,1,2
//   out  (B, T, H, D)     softmax(q kᵀ/√D + mask) v, viewed as [B,T,C] for c_proj
//   lse  (B, H, T)        log Σ_j exp(q_t·k_j/√D) over the keys row t sees
//   dqkv (B, T, 3, H, D)  overwritten
#pragma once

#include <cstdint>

#include "kernels/gemm_bf16.h"

namespace px::kernels {

struct AttentionDims {
  int64_t B = 1, T = 1, H = 1, D = 1;
  bool causal = true;  // row t sees keys [0, t]; else all T
};

void attention(const AttentionDims& a, const float* qkv, float* out, float* lse);
void attention_backward(const AttentionDims& a, const float* qkv, const float* out, const float* lse,
                        const float* dout, float* dqkv);

// The same under bf16 mixed precision: bf16 operands, fp32 accumulation
// and softmax statistics. qkv, and backward's out, are fp32 (rounded as
// they are read) or stored in bf16. Where attention_runs_on_amx (the CPU
// has AMX-BF16, D a multiple of 32) the tile products run on AMX with the
// probabilities and dS rounded to bf16 (kernels/attention_amx.cc);
// elsewhere a head's q, k and v are widened into fp32 scratch and run the
// fp32 tiles, the fp32 kernel's result on the rounded qkv (and out) bit
// for bit.
void attention_bf16(const AttentionDims& a, Bf16Operand qkv, float* out, float* lse);
void attention_backward_bf16(const AttentionDims& a, Bf16Operand qkv, Bf16Operand out, const float* lse,
                             const float* dout, float* dqkv);

// The bf16 kernels with their products on AMX tiles (kernels/amx_gemm.h),
// which attention_bf16 and attention_backward_bf16 call where this holds.
bool attention_runs_on_amx(const AttentionDims& a);
void attention_bf16_amx(const AttentionDims& a, Bf16Operand qkv, float* out, float* lse);
void attention_backward_bf16_amx(const AttentionDims& a, Bf16Operand qkv, Bf16Operand out, const float* lse,
                                 const float* dout, float* dqkv);

// The textbook computation in double, the T x T probabilities made whole:
// the reference the tiled kernels are tested against. Backward makes the
// probabilities itself.
namespace ref {
void attention(const AttentionDims& a, const float* qkv, float* out, float* lse);
void attention_backward(const AttentionDims& a, const float* qkv, const float* dout, float* dqkv);
}  // namespace ref

}  // namespace px::kernels
