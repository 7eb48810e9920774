// Causal multi-head self-attention on a fused q,k,v tensor.
// Legend: B batch, T time, H heads, D head dim (C = H*D).
//   qkv  (B, T, 3, H, D)  -- the GPT-2 c_attn output [B,T,3C] viewed; q,k,v at index 0,1,2
//   out  (B, T, H, D)     -- viewed as [B,T,C] for c_proj
//   probs (B, H, T, T)    -- softmax(q k^T / sqrt(D) + causal mask); saved for backward
// Entries of probs above the diagonal are zero.
#pragma once

#include <cstdint>

#include "kernels/gemm_bf16.h"

namespace px::kernels {

void attention(int64_t B, int64_t T, int64_t H, int64_t D, const float* qkv, float* out,
               float* probs);
// dqkv overwritten.
void attention_backward(int64_t B, int64_t T, int64_t H, int64_t D, const float* qkv,
                        const float* probs, const float* dout, float* dqkv);

// The same under bf16 mixed precision: the four products per head (two in
// backward's dQ/dK/dV besides dP) are bf16 GEMMs with fp32 accumulation
// (kernels/gemm_bf16.h); the softmax and its gradient run in fp32, the
// gradient on the probabilities at bf16 precision. qkv may be fp32
// (rounded as it is read) or stored in bf16, probs likewise in backward; a
// bf16 operand gives the result of its fp32 original, bit for bit.
// Operands' `ld` is unused (the layouts above fix the strides). Heads
// narrower than 64 multiply in fp32 the values widened from bf16 (small
// products run faster so; the inputs' precision is the same).
void attention_bf16(int64_t B, int64_t T, int64_t H, int64_t D, Bf16Operand qkv, float* out, float* probs);
void attention_backward_bf16(int64_t B, int64_t T, int64_t H, int64_t D, Bf16Operand qkv, Bf16Operand probs,
                             const float* dout, float* dqkv);

namespace ref {
void attention(int64_t B, int64_t T, int64_t H, int64_t D, const float* qkv, float* out,
               float* probs);
void attention_backward(int64_t B, int64_t T, int64_t H, int64_t D, const float* qkv,
                        const float* probs, const float* dout, float* dqkv);
}  // namespace ref

}  // namespace px::kernels
