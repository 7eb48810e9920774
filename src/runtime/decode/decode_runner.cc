#include "runtime/decode/decode_runner.h"

#include <cstring>
#include <map>

#include "core/error.h"
#include "parallel/lower.h"
#include "runtime/decode/decode_strategy.h"
#include "runtime/state/program_state.h"

namespace px::decode {

int64_t kv_cache_bytes(const nn::GptConfig& c, const KvCacheShape& s) {
  return c.n_layer * s.blocks * 2 * s.block_tokens * c.n_embd * static_cast<int64_t>(sizeof(float));
}

int64_t padded_rows(int64_t tokens) {
  PX_CHECK(tokens >= 1, "an iteration of {} tokens", tokens);
  if (tokens <= 2) return tokens;
  if (tokens <= 4) return 4;
  return (tokens + 7) / 8 * 8;
}

DecodeRunner::DecodeRunner(const nn::GptConfig& config, const ParamStore& weights, KvCacheShape cache,
                           Precision precision, DecodeGroup* group)
    : config_(config), cache_(cache), precision_(precision), group_(group), weights_(weights) {
  nn::validate(config_);
  check_tensor_parallel(config_, group_ ? group_->size() : 1);
  if (cache_.blocks < 1 || cache_.block_tokens < 1)
    fail("decode: a KV cache of {} blocks of {} tokens; expected at least one block of one token", cache_.blocks,
         cache_.block_tokens);
}

DecodeRunner::~DecodeRunner() {
  if (group_ == nullptr || !group_->lead()) return;
  try {
    stop_followers();
  } catch (const std::exception&) {
    // A follower is gone: its own failure is what gets reported.
  }
}

// This rank's weights (its shard where the strategy splits one) and its
// caches at their local shape (its heads), bound to the executor.
void DecodeRunner::bind(const parallel::Program& program) {
  std::map<std::string, Tensor> caches;
  for (int64_t layer = 0; layer < config_.n_layer; ++layer) caches[nn::kv_cache_name(layer)] = Tensor();
  NamedTensors named;
  for (const parallel::ParamLayout& param : program.params) {
    const auto cache = caches.find(param.name);
    if (cache != caches.end()) cache->second = Tensor::zeros(param.shape, DType::f32);
    named.emplace_back(param.name, cache != caches.end() ? cache->second : local_of(program, weights_.at(param.name), param));
  }
  for (int64_t layer = 0; layer < config_.n_layer; ++layer) {
    caches_.push_back(caches.at(nn::kv_cache_name(layer)));
    PX_CHECK(caches_.back().defined(), "the decode Program has no parameter '{}'", nn::kv_cache_name(layer));
  }
  bound_ = ParamStore::of(std::move(named));
}

void DecodeRunner::lower_for(int64_t tokens) {
  const nn::DecodeModel model =
      nn::build_gpt_decode(config_, {.tokens = tokens, .cache_blocks = cache_.blocks, .block_tokens = cache_.block_tokens});
  const int tp = group_ ? group_->size() : 1;
  parallel::Strategy strategy = decode_strategy(model.graph, config_, tp);
  strategy.precision = precision_;
  strategy.lowering.updates = false;
  strategy.lowering.global_norm = false;
  // mesh {dp: 1, tp}: this rank's coordinate on tp is its group rank.
  parallel::Program program = parallel::lower(
      {.forward = &model.graph, .outputs = {model.logits}, .shard_outputs = model.qkv, .training = false}, strategy,
      group_ ? group_->rank() : 0);
  if (!executor_) {
    bind(program);
    AxisGroups groups;
    if (tp > 1) groups.axis = {nullptr, &group_->ranks()};
    executor_ = std::make_unique<ProgramExecutor>(std::move(program), groups);
    executor_->use_parameters(bound_);
    feeds_ = {model.tokens, model.positions, model.segments};
  } else {
    executor_->add_program(std::move(program));
  }
  lowered_.insert(tokens);
}

Tensor DecodeRunner::run(const DecodeBatch& batch) {
  PX_CHECK(batch.rows() >= 1, "an empty decode batch");
  PX_CHECK_EQ(batch.table_entries, table_entries());
  for (int32_t t : batch.tokens)
    if (t < 0 || t >= config_.vocab) fail("decode: token {} is outside the vocabulary of {}", t, config_.vocab);
  if (group_ != nullptr) group_->send_run(batch);
  return run_here(batch);
}

void DecodeRunner::idle() {
  if (group_ != nullptr && !stopped_) group_->send_idle();
}

void DecodeRunner::stop_followers() {
  if (group_ == nullptr || stopped_) return;
  stopped_ = true;
  group_->send_stop();
}

void DecodeRunner::follow() {
  PX_CHECK(group_ != nullptr && !group_->lead(), "decode: follow() is for a follower of a tensor-parallel group");
  DecodeBatch batch;
  for (;;) {
    const Tick tick = group_->receive(batch);
    if (tick == Tick::stop) return;
    if (tick == Tick::run) run_here(batch);
  }
}

void DecodeRunner::prepare(int64_t max_rows) {
  for (int64_t rows = 1; rows <= padded_rows(max_rows); rows = padded_rows(rows + 1))
    if (!lowered_.count(rows)) lower_for(rows);
}

Tensor DecodeRunner::run_here(const DecodeBatch& batch) {
  const int64_t N = batch.rows(), rows = padded_rows(N), width = 3 + batch.table_entries;
  if (!lowered_.count(rows)) lower_for(rows);
  // Padding rows: token 0 at position 0, each a one-row sequence with no
  // cached positions (it attends to itself), never written to the cache.
  Tensor tokens = Tensor::zeros({rows}, DType::i32), positions = Tensor::zeros({rows}, DType::i32);
  Tensor segments = Tensor::zeros({rows, width}, DType::i32);
  std::memcpy(tokens.raw(), batch.tokens.data(), batch.tokens.size() * sizeof(int32_t));
  std::memcpy(positions.raw(), batch.positions.data(), batch.positions.size() * sizeof(int32_t));
  std::memcpy(segments.raw(), batch.segments.data(), batch.segments.size() * sizeof(int32_t));
  for (int64_t r = N; r < rows; ++r) {
    segments.data<int32_t>()[r * width] = static_cast<int32_t>(r);  // its first row: itself
    segments.data<int32_t>()[r * width + 1] = 1;                    // one row, no cached positions
  }
  StepResult step = executor_->run(
      {.feeds = {{feeds_[0], tokens}, {feeds_[1], positions}, {feeds_[2], segments}}, .global_rows = rows});
  PX_CHECK_EQ(step.outputs.size(), 1u);
  std::vector<Tensor>& outputs = step.outputs.front();
  write_cache(batch, {outputs.begin() + 1, outputs.end()});  // the batch's N rows only
  if (rows == N) return outputs.front();
  Tensor logits = Tensor::empty({N, config_.vocab}, DType::f32);
  std::memcpy(logits.raw(), outputs.front().raw(), static_cast<size_t>(N * config_.vocab) * sizeof(float));
  return logits;
}

void DecodeRunner::write_cache(const DecodeBatch& batch, const std::vector<Tensor>& qkv) {
  PX_CHECK_EQ(static_cast<int64_t>(qkv.size()), config_.n_layer);
  const int64_t BS = cache_.block_tokens;
  for (size_t layer = 0; layer < qkv.size(); ++layer) {
    const Tensor& q = qkv[layer];  // (N, 3, H, D): this rank's heads
    const int64_t H = q.dim(2), D = q.dim(3);
    float* cache = caches_[layer].f32();
    for (int64_t r = 0; r < batch.rows(); ++r) {
      const int64_t slot = batch.slots[static_cast<size_t>(r)], block = slot / BS, at = slot % BS;
      for (int which = 0; which < 2; ++which)
        for (int64_t h = 0; h < H; ++h)
          std::memcpy(cache + (((block * 2 + which) * H + h) * BS + at) * D, q.f32() + ((r * 3 + 1 + which) * H + h) * D,
                      static_cast<size_t>(D) * sizeof(float));
    }
  }
}

}  // namespace px::decode
