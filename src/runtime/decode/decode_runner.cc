#include "runtime/decode/decode_runner.h"

#include <cstring>

#include "core/error.h"
#include "parallel/lower.h"

namespace px::decode {

int64_t kv_cache_bytes(const nn::GptConfig& c, const KvCacheShape& s) {
  return c.n_layer * s.blocks * 2 * s.block_tokens * c.n_embd * static_cast<int64_t>(sizeof(float));
}

DecodeRunner::DecodeRunner(const nn::GptConfig& config, const ParamStore& weights, KvCacheShape cache,
                           Precision precision)
    : config_(config), cache_(cache), precision_(precision) {
  nn::validate(config_);
  const int64_t H = config_.n_head, D = config_.n_embd / H;
  NamedTensors named = weights.named();
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    caches_.push_back(Tensor::zeros({cache_.blocks, 2, H, cache_.block_tokens, D}, DType::f32));
    named.emplace_back(nn::kv_cache_name(i), caches_.back());
  }
  bound_ = ParamStore::of(std::move(named));
}

DecodeRunner::~DecodeRunner() = default;

void DecodeRunner::lower_for(int64_t tokens) {
  const nn::DecodeModel model =
      nn::build_gpt_decode(config_, {.tokens = tokens, .cache_blocks = cache_.blocks, .block_tokens = cache_.block_tokens});
  std::vector<ValueId> outputs = {model.logits};
  outputs.insert(outputs.end(), model.qkv.begin(), model.qkv.end());
  const std::vector<std::string> batch_inputs = {"tokens", "positions", "segments"};
  parallel::Program program =
      parallel::lower_single(model.graph, kNoValue, outputs, batch_inputs, false, precision_);
  if (!executor_) {
    executor_ = std::make_unique<ProgramExecutor>(std::move(program), AxisGroups{});
    executor_->use_parameters(bound_);
    feeds_ = {model.tokens, model.positions, model.segments};
  } else {
    executor_->add_program(std::move(program));
  }
  lowered_.insert(tokens);
}

Tensor DecodeRunner::run(const DecodeBatch& batch) {
  const int64_t N = batch.rows();
  PX_CHECK(N >= 1, "an empty decode batch");
  PX_CHECK_EQ(batch.table_entries, table_entries());
  if (!lowered_.count(N)) lower_for(N);
  Tensor tokens = Tensor::empty({N}, DType::i32), positions = Tensor::empty({N}, DType::i32);
  Tensor segments = Tensor::empty({N, 3 + batch.table_entries}, DType::i32);
  std::memcpy(tokens.raw(), batch.tokens.data(), batch.tokens.size() * sizeof(int32_t));
  std::memcpy(positions.raw(), batch.positions.data(), batch.positions.size() * sizeof(int32_t));
  std::memcpy(segments.raw(), batch.segments.data(), batch.segments.size() * sizeof(int32_t));
  for (int32_t t : batch.tokens)
    if (t < 0 || t >= config_.vocab) fail("decode: token {} is outside the vocabulary of {}", t, config_.vocab);
  StepResult step = executor_->run(
      {.feeds = {{feeds_[0], tokens}, {feeds_[1], positions}, {feeds_[2], segments}}, .global_rows = N});
  PX_CHECK_EQ(step.outputs.size(), 1u);
  std::vector<Tensor>& outputs = step.outputs.front();
  write_cache(batch, {outputs.begin() + 1, outputs.end()});
  return outputs.front();
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
