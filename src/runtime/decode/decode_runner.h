// One rank's decode forward: the decode Program (nn/gpt_decode.h) lowered
// for each token count an iteration brings (shapes are static, and N is
// exact: no padding), all run by one ProgramExecutor over the model's
// weights, which it reads in place, and this rank's paged KV cache, which
// the runner owns and writes after each iteration (each row's k and v into
// its slot). Tensor parallelism will give each rank its heads of the cache.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "core/tensor.h"
#include "graph/precision.h"
#include "nn/gpt_decode.h"
#include "runtime/decode/decode_batch.h"
#include "runtime/executor/program_executor.h"
#include "runtime/state/param_store.h"

namespace px::decode {

struct KvCacheShape {
  int64_t blocks = 1;         // NB
  int64_t block_tokens = 16;  // BS
  bool operator==(const KvCacheShape&) const = default;
};

// Bytes of the KV cache of `config` for `shape` (every layer's k and v, fp32).
int64_t kv_cache_bytes(const nn::GptConfig& config, const KvCacheShape& shape);

class DecodeRunner {
 public:
  // `weights`: the model's (gpt.h's names); read in place, so they must
  // outlive the runner.
  DecodeRunner(const nn::GptConfig& config, const ParamStore& weights, KvCacheShape cache,
               Precision precision = Precision::fp32);
  ~DecodeRunner();

  // Runs the iteration: returns the logits of every row (N, V), and writes
  // every row's k and v into its cache slot.
  Tensor run(const DecodeBatch& batch);

  int64_t table_entries() const { return nn::block_table_entries(config_, cache_.block_tokens); }
  const KvCacheShape& cache() const { return cache_; }
  const nn::GptConfig& config() const { return config_; }
  // Token counts lowered so far (one Program each).
  const std::set<int64_t>& lowered() const { return lowered_; }

 private:
  void lower_for(int64_t tokens);
  void write_cache(const DecodeBatch& batch, const std::vector<Tensor>& qkv);

  nn::GptConfig config_;
  KvCacheShape cache_;
  Precision precision_;
  ParamStore bound_;            // the weights (the caller's tensors) and the caches
  std::vector<Tensor> caches_;  // per layer (NB, 2, H, BS, D)
  std::unique_ptr<ProgramExecutor> executor_;
  std::set<int64_t> lowered_;
  std::vector<ValueId> feeds_;  // tokens, positions, segments: the forward graph's ids (the same for every N)
};

}  // namespace px::decode
