// One rank's decode forward: the decode Program (nn/gpt_decode.h) lowered
// for each row bucket an iteration's token count N falls in (shapes are
// static; padded_rows: 1, 2, 4, then multiples of 8, so at most 7 rows of
// an iteration are padding, each a sequence of its own that nothing reads,
// and a server lowers a few dozen Programs once, up front, instead of one
// on the first iteration of every N), all run by one ProgramExecutor over the model's
// weights and this rank's paged KV cache, which the runner owns and writes
// after each iteration (each row's k and v into its slot). In a
// tensor-parallel group (decode_group.h, decode_strategy.h) every rank
// holds its shard of the weights and the k and v of its heads; the lead
// announces each batch before running it and the followers run what they
// are told until it stops them.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "core/tensor.h"
#include "graph/precision.h"
#include "nn/gpt_decode.h"
#include "runtime/decode/decode_batch.h"
#include "runtime/decode/decode_group.h"
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

// The rows an iteration of N tokens runs: N up to 2, then 4, then N
// rounded up to a multiple of 8.
int64_t padded_rows(int64_t tokens);

class DecodeRunner {
 public:
  // `weights`: the whole model's (gpt.h's names, on every rank of a group);
  // read in place where a rank holds them whole, so they must outlive the
  // runner. `group`: the tensor-parallel group this rank is part of
  // (nullptr: one rank); it must outlive the runner.
  DecodeRunner(const nn::GptConfig& config, const ParamStore& weights, KvCacheShape cache,
               Precision precision = Precision::fp32, DecodeGroup* group = nullptr);
  // The lead of a group stops its followers if nobody did (an engine that
  // failed), so they end instead of waiting out their timeout.
  ~DecodeRunner();

  // Runs the iteration (the lead of a group announces it first): returns
  // the logits of every row (N, V), whole, and writes every row's k and v
  // into its cache slot.
  Tensor run(const DecodeBatch& batch);
  // Lowers the Program of every row bucket up to `max_rows` now (a
  // server's --max-batch-tokens), so no iteration waits for a lowering.
  // Local: each rank of a group prepares its own.
  void prepare(int64_t max_rows);
  // The lead, when no batch is ready: keeps the followers' waits short of
  // their timeout. Nothing without a group.
  void idle();
  // The lead, once: releases the followers from follow(). Nothing without
  // a group.
  void stop_followers();
  // A follower: runs every batch the lead announces until it stops them.
  void follow();

  int64_t table_entries() const { return nn::block_table_entries(config_, cache_.block_tokens); }
  const KvCacheShape& cache() const { return cache_; }
  const nn::GptConfig& config() const { return config_; }
  // The heads this rank computes and caches (0 before the first run).
  int64_t local_heads() const { return caches_.empty() ? 0 : caches_.front().dim(2); }
  // Row buckets lowered so far (one Program each).
  const std::set<int64_t>& lowered() const { return lowered_; }

 private:
  void lower_for(int64_t tokens);
  void bind(const parallel::Program& program);
  Tensor run_here(const DecodeBatch& batch);
  void write_cache(const DecodeBatch& batch, const std::vector<Tensor>& qkv);

  nn::GptConfig config_;
  KvCacheShape cache_;
  Precision precision_;
  DecodeGroup* group_;
  const ParamStore& weights_;   // whole
  ParamStore bound_;            // this rank's: the weights (the caller's tensors where whole) and the caches
  std::vector<Tensor> caches_;  // per layer (NB, 2, H / tp, BS, D)
  bool stopped_ = false;
  std::unique_ptr<ProgramExecutor> executor_;
  std::set<int64_t> lowered_;
  std::vector<ValueId> feeds_;  // tokens, positions, segments: the forward graph's ids (the same for every N)
};

}  // namespace px::decode
