// Causal attention of query blocks against key/value blocks, for context
// parallelism's ring (LightSeq's DistAttn): a T-token sequence cut into P
// blocks by core/block.h's rule, each padded to L = block(T, P, 0).count
// tokens, laid out (B, P, L, ...) — the blocked layout; balanced, block p
// holds zigzag block p's two runs of tokens, early then late. Query block p
// attends key block (p - shift) mod P, causally by the tokens' global
// positions; merging the P partial results by their log-sum-exps gives
// whole-sequence causal attention (kernels/attention.h). Only what the
// mask lets through is computed: a query run against the keys its last row
// sees (so a balanced block pair costs two of the four run pairs).
// Legend: B batch, P blocks held here, L padded block length, H heads,
// D head dim, C = H*D.
//   qkv   (B, P, L, 3, H, D)  q at index 0 (k, v unused here)
//   kv    (B, P, L, 2, H, D)  the key/value blocks: k at 0, v at 1
//   out   (B, P, L, H, D)     softmax(q kᵀ/√D + mask) v over the key block; 0 where a row sees no key
//   lse   (B, P, L, H)        log Σ exp of the row's scaled scores; -inf where it sees no key
// Nothing (L x L) is kept: backward makes the softmax again from the
// scores and lse (exp(s - lse)), so the ring saves only q, the key/value
// blocks and each block's out and lse (LightSeq's rematerialisation-aware
// scheme: a recompute need not run attention again).
// Padded rows and columns (beyond a block's tokens) are 0 (-inf in lse).
#pragma once

#include <cstdint>
#include <span>

namespace px::kernels {

struct BlockGrid {
  int64_t B = 1, P = 1, L = 1, H = 1, D = 1;
  int64_t tokens = 1;   // T, the sequence's length
  int64_t parts = 1;    // its blocks (P of the whole sequence)
  int64_t first = 0;    // the global index of the first block held here
  int64_t shift = 0;    // query block p reads key block (p - shift) mod parts
  bool balanced = false;  // zigzag blocks (core/block.h): block p the 2·parts blocks p and 2·parts-1-p
};

// The score entries the g.P query blocks held compute against their key
// blocks, per batch row and head (what the mask lets through, per run as
// the kernels compute it): a rank's attention work at one ring step.
double block_entries(const BlockGrid& g);
// The same averaged over all `parts` blocks: a block's work for the cost
// model, which does not know which block a shard holds.
double mean_block_entries(const BlockGrid& g);

void block_attention(const BlockGrid& g, const float* qkv, const float* kv, float* out, float* lse);

// Gradients of one block_attention given its out, lse, dout and dlse: dq
// into the q slot of dqkv (its k and v slots zeroed), dkv overwritten.
void block_attention_backward(const BlockGrid& g, const float* qkv, const float* kv, const float* out,
                              const float* lse, const float* dout, const float* dlse, float* dqkv, float* dkv);

// out = Σ_j exp(lse_j - lse) o_j with lse = log Σ_j exp(lse_j), per row
// (B·P·L rows of H heads): the partial results of n key blocks merged.
// Rows every part skips (all lse_j = -inf) are 0.
void merge_attention(int64_t rows, int64_t H, int64_t D, std::span<const float* const> o,
                     std::span<const float* const> lse, float* out);
// do_j = w_j dout and dlse_j = w_j (<dout, o_j> - <dout, out>), w_j = exp(lse_j - lse).
void merge_attention_backward(int64_t rows, int64_t H, int64_t D, std::span<const float* const> o,
                              std::span<const float* const> lse, const float* dout, std::span<float* const> dout_parts,
                              std::span<float* const> dlse_parts);

}  // namespace px::kernels
