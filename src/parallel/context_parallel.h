// Context parallelism (Strategy::context) as placement seeds on one mesh
// axis: where the sequence is split. Everything else follows from
// propagation and the one resharding rule (lower/propagate.h), as for
// tensor parallelism: no collective is placed here.
//
//   the sequence   the first values with a sequence dim, made from the
//                  batch inputs (the GPT's token embedding): S(1), so the
//                  residual stream, LayerNorms, MLPs and the loss run on
//                  each rank's chunk of the tokens, the position table's
//                  rows sliced to the chunk's positions
//   attention      all-to-all (DeepSpeed-Ulysses): its output S(2), its
//                  heads, so q|k|v arrive by an all-to-all S(1) -> S(3)
//                  (each rank all the tokens of its heads) and the causal
//                  mask sees whole sequences; the merged heads after it
//                  S(1) again, the inverse all-to-all; backward the same
//                  (the gradient of q|k|v, "<split>.grad", S(1), so the
//                  q|k|v layer's weight gradient is a summand)
//
// Weights stay whole (B) along the axis; their gradients come out P and
// join the data axis' reduction (parallel/lower.h: the data path over data
// x context ranks).
#pragma once

#include <vector>

#include "graph/graph.h"
#include "parallel/strategy.h"

namespace px::parallel {

// px::Error when the model has no attention (nothing to split the
// sequence of), no sequence dim made from its inputs, or (all-to-all) a
// head count `ranks` does not divide.
std::vector<PlacementSeed> context_parallel_seeds(const Graph& graph, const ContextOptions& options, int ranks);

// The ring (ContextMethod::ring), as graph rewriting before autodiff: each
// attention node's readers read instead
//   qkv_b = to_blocks(qkv)                    (B, P, L, 3, H, D): P = `parts` blocks
//   kv_0 = k|v of qkv_b; kv_j = ring_shift(kv_{j-1})   each block's keys, passed on
//   out_j, lse_j = block_attention(qkv_b, kv_j, shift j)  queries against the block held
//   out = from_blocks(merge_attention(out_*, lse_*))     merged by log-sum-exp
// (graph/ops/seq_blocks.cc, ring_shift.cc, block_attention.cc). Split along
// the context axis each rank holds one block of everything: ring_shift is
// a send to the next rank and a receive from the previous one
// (lower/schedule.cc), and autodiff's ring_shift(-1) passes the key/value
// gradients back the same way. Every value stays S(1): nothing is gathered.
// The attention nodes stay, unread (the lowering schedules only what the
// loss needs).
// `balanced`: the blocks are zigzag blocks (ContextOptions::balance).
void ring_attention(Graph& graph, int parts, bool balanced);

}  // namespace px::parallel
