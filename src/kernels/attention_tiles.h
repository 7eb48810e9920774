// The tile loop every attention kernel runs (FlashAttention's, on a CPU):
// one head's queries in tiles of kQueryTile rows against its keys in tiles
// of kKeyTile, an online softmax, and nothing (rows x keys) kept. Forward
// leaves the output and each row's log-sum-exp; backward makes each tile's
// probabilities again as exp(scores - lse). Internal to src/kernels: the
// whole-sequence kernel (kernels/attention.h) and the ring's block pairs
// (kernels/block_attention.h) differ only in where their operands sit and
// in which keys each query row sees.
// Legend: R query rows, N keys, D head dim; every matrix is a strided view.
#pragma once

#include <cstdint>

namespace px::kernels::detail {

// Measured 2026-11-29 (one thread, B 8, H 6, D 64, fwd + bwd): at T = 1024
// 128 x 256 tiles ran 72.7 GFLOP/s, 64 x 128 61.8, 128 x 128 69.2, 64 x 256
// 68.9, 256 x 256 68.3; a tile's scores (128 KiB) stay in L2.
constexpr int64_t kQueryTile = 128;
constexpr int64_t kKeyTile = 256;

// One head: queries (R, D) against keys and values (N, D).
struct AttentionHead {
  const float* q = nullptr;  // (R, D), rows ldq apart
  int64_t ldq = 0;
  const float* k = nullptr;  // (N, D), rows ldkv apart
  const float* v = nullptr;  // (N, D), rows ldkv apart
  int64_t ldkv = 0;
  int64_t rows = 0, D = 0;
  // seen[r]: query row r sees keys [0, seen[r]) (the mask: a prefix of the
  // keys, non-decreasing in r). 0 = the row sees no key.
  const int64_t* seen = nullptr;
  float scale = 1;  // of the scores q·k
};

// Query rows [r0, min(r0 + kQueryTile, R)): out (rows ldo apart) =
// softmax(scale q kᵀ + mask) v and lse[r·lse_stride] = log Σ_j exp(scale
// q_r·k_j); a row that sees no key gets out 0 and lse -inf.
void attention_query_tile(const AttentionHead& h, int64_t r0, float* out, int64_t ldo, float* lse,
                          int64_t lse_stride);

// Gradients of one head given its forward's lse, `delta` (per row,
// <dout_r, out_r> less any incoming d lse_r: softmax's row term) and dout
// (rows lddo apart). Adds into dq (rows lddq apart), dk and dv (rows lddkv
// apart); the caller zeroes them.
struct AttentionHeadGrad {
  const float* lse = nullptr;
  int64_t lse_stride = 1;
  const float* delta = nullptr;  // R floats
  const float* dout = nullptr;
  int64_t lddo = 0;
  float* dq = nullptr;
  int64_t lddq = 0;
  float* dk = nullptr;
  float* dv = nullptr;
  int64_t lddkv = 0;
};
void attention_head_backward(const AttentionHead& h, const AttentionHeadGrad& g);

}  // namespace px::kernels::detail

namespace px::kernels::detail {

// Backward of head `bh` = b·H + h of the fused layout (kernels/attention.h:
// dout (B, T, H, D), lse (B, H, T), dqkv (B, T, 3, H, D)), whose q, k, v
// `head` reads wherever the caller keeps them (T = head.rows), given the
// head's T deltas <dout_t, out_t>: the head's slots of dqkv zeroed, then
// the tiles.
void fused_head_backward(const AttentionHead& head, int64_t bh, int64_t H, const float* delta, const float* lse,
                         const float* dout, float* dqkv);

}  // namespace px::kernels::detail
