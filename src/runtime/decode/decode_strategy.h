// How the decode Program (nn/gpt_decode.h) is split over a tensor-parallel
// group: Megatron's splits found by structure (parallel/tensor_parallel.h),
// the same as a training run's, plus each layer's KV cache split by head
// (S(2) of (NB, 2, H, BS, D)), so a rank caches the k and v of the heads it
// computes. The logits come out whole (lower.h: outputs are gathered along
// the model axes), so the lead rank samples from the whole vocabulary.
#pragma once

#include "nn/gpt.h"
#include "parallel/strategy.h"

namespace px::decode {

// The decode graph's batch inputs (fed per row, never split: the mesh's
// data axis has one rank).
const std::vector<std::string>& decode_batch_inputs();

// px::Error when `tp` ranks cannot split the model: each computes and
// caches whole heads.
void check_tensor_parallel(const nn::GptConfig& config, int tp);

// Mesh {dp: 1, tp} (check_tensor_parallel's rule holds).
parallel::Strategy decode_strategy(const Graph& decode_graph, const nn::GptConfig& config, int tp);

}  // namespace px::decode
