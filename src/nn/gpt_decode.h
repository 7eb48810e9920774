// The GPT of gpt.h as one decoding iteration (Orca's selective batching,
// vLLM's paged KV cache): N tokens of any number of sequences, concatenated
// without padding, each at its own position. The GEMMs, LayerNorms and
// GELUs run over all N rows at once; attention (graph/ops/paged_attention)
// runs per sequence over its cached keys and values and its tokens of this
// iteration. Legend: N tokens, C = H*D, NB cache blocks of BS tokens, MB =
// ceil(block / BS) block-table entries, V vocabulary.
//   inputs   tokens (N) i32, positions (N) i32, segments (N, 3 + MB) i32
//            (per row: its sequence's first row here, its rows, its cached
//            positions, its block table; graph/ops/paged_attention.cc)
//   params   gpt.h's, and per layer h.{i}.attn.kv_cache (NB, 2, H, BS, D):
//            state the decode runner owns and writes, never a learned weight
//   outputs  logits (N, V); per layer qkv (N, 3, H, D), whose k and v the
//            runner writes into their cache slots after the iteration
// Only the decode room (runtime/decode) lowers it: nothing that saves or
// trains parameters may see the cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "nn/gpt.h"

namespace px::nn {

struct DecodeShape {
  int64_t tokens = 1;         // N
  int64_t cache_blocks = 1;   // NB
  int64_t block_tokens = 16;  // BS
  bool operator==(const DecodeShape&) const = default;
};

struct DecodeModel {
  Graph graph;
  ValueId tokens = kNoValue, positions = kNoValue, segments = kNoValue;
  ValueId logits = kNoValue;
  std::vector<ValueId> qkv;          // per layer
  std::vector<std::string> caches;   // per layer: the cache parameter's name
};

// Block-table entries a sequence of the model's context needs.
int64_t block_table_entries(const GptConfig& config, int64_t block_tokens);
// The name of layer `layer`'s cache parameter.
std::string kv_cache_name(int64_t layer);

DecodeModel build_gpt_decode(const GptConfig& config, const DecodeShape& shape);

}  // namespace px::nn
