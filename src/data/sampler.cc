#include "data/sampler.h"

#include <cstring>

#include "core/error.h"

namespace px {
namespace {

std::array<uint64_t, 4> rng_state_from_json(const nlohmann::json& json, std::string_view what) {
  if (!json.is_array() || json.size() != 4)
    fail("{}: rng_state {} is invalid, expected an array of 4 unsigned 64-bit integers", what,
         json.dump());
  std::array<uint64_t, 4> state{};
  for (size_t i = 0; i < 4; ++i) {
    if (!json[i].is_number_unsigned() &&
        !(json[i].is_number_integer() && json[i].get<int64_t>() >= 0))
      fail("{}: rng_state {} is invalid, expected an array of 4 unsigned 64-bit integers", what,
           json.dump());
    state[i] = json[i].get<uint64_t>();
  }
  return state;
}

int64_t int_from_json(const nlohmann::json& json, const char* key, std::string_view what) {
  if (!json.is_object() || !json.contains(key) || !json[key].is_number_integer())
    fail("{}: state {} has no integer '{}'", what, json.dump(), key);
  return json[key].get<int64_t>();
}

}  // namespace

Tensor gather_rows(const Tensor& source, std::span<const int64_t> rows) {
  PX_CHECK_GE(source.rank(), 1);
  std::vector<int64_t> dims = source.shape().dims();
  const int64_t n = dims[0];
  dims[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(Shape(dims), source.dtype());  // (rows, ...)
  const size_t row_bytes =
      static_cast<size_t>(source.shape().numel(1, source.rank())) * dtype_size(source.dtype());
  const char* src = static_cast<const char*>(source.raw());
  char* dst = static_cast<char*>(out.raw());
  for (size_t i = 0; i < rows.size(); ++i) {
    PX_CHECK(rows[i] >= 0 && rows[i] < n, "row {} of a tensor with {} rows", rows[i], n);
    std::memcpy(dst + i * row_bytes, src + static_cast<size_t>(rows[i]) * row_bytes, row_bytes);
  }
  return out;
}

// ---------------------------------------------------------------- epochs

void to_json(nlohmann::json& json, const EpochSamplerState& state) {
  json = {{"epoch", state.epoch}, {"position", state.position}, {"rng_state", state.rng_state}};
}

void from_json(const nlohmann::json& json, EpochSamplerState& state) {
  constexpr std::string_view what = "epoch sampler";
  state.epoch = int_from_json(json, "epoch", what);
  state.position = int_from_json(json, "position", what);
  if (!json.contains("rng_state")) fail("{}: state {} has no 'rng_state'", what, json.dump());
  state.rng_state = rng_state_from_json(json["rng_state"], what);
}

EpochSampler::EpochSampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, bool drop_last)
    : size_(dataset_size),
      batch_(batch_size),
      epoch_end_(drop_last && batch_size > 0 ? dataset_size - dataset_size % batch_size : dataset_size),
      rng_(seed) {
  if (dataset_size < 1)
    fail("epoch sampler: dataset size {} is invalid, expected at least 1 example", dataset_size);
  if (batch_size < 1) fail("epoch sampler: batch size {} is invalid, expected >= 1", batch_size);
  if (epoch_end_ == 0)
    fail("epoch sampler: batches of {} with drop_last leave no batch of a dataset of {} examples; expected a "
         "batch size of at most {}",
         batch_size, dataset_size, dataset_size);
  start_epoch();
}

void EpochSampler::start_epoch() {
  epoch_rng_state_ = rng_.state();
  permutation_.resize(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) permutation_[i] = i;
  for (int64_t i = size_ - 1; i >= 1; --i)
    std::swap(permutation_[i], permutation_[rng_.below(static_cast<uint64_t>(i + 1))]);
}

EpochBatch EpochSampler::next_batch() {
  if (position_ == epoch_end_) {
    ++epoch_;
    position_ = 0;
    start_epoch();
  }
  const int64_t end = std::min(position_ + batch_, epoch_end_);
  EpochBatch batch{.epoch = epoch_,
                   .batch_in_epoch = position_ / batch_,
                   .last_in_epoch = end == epoch_end_,
                   .global_rows = end - position_,
                   .indices = {permutation_.begin() + position_, permutation_.begin() + end}};
  position_ = end;
  return batch;
}

EpochSamplerState EpochSampler::state() const {
  return {.epoch = epoch_, .position = position_, .rng_state = epoch_rng_state_};
}

void EpochSampler::set_state(const EpochSamplerState& state) {
  if (state.epoch < 0 || state.position < 0 || state.position > epoch_end_ ||
      (state.position % batch_ != 0 && state.position != epoch_end_))
    fail(
        "epoch sampler: state (epoch {}, position {}) does not fit a dataset of {} examples in "
        "batches of {}, expected 0 <= position <= {} at a batch boundary",
        state.epoch, state.position, size_, batch_, epoch_end_);
  rng_.set_state(state.rng_state);
  start_epoch();
  epoch_ = state.epoch;
  position_ = state.position;
}

// ---------------------------------------------------------------- text

TokenBatch make_windows(std::span<const uint8_t> bytes, std::span<const int64_t> offsets,
                        int64_t block_size) {
  const int64_t rows = static_cast<int64_t>(offsets.size());
  TokenBatch batch{.inputs = Tensor::empty(Shape{rows, block_size}, DType::i32),    // (b, T)
                   .targets = Tensor::empty(Shape{rows, block_size}, DType::i32)};  // (b, T)
  int32_t* x = batch.inputs.data<int32_t>();
  int32_t* y = batch.targets.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = offsets[r];
    PX_CHECK(off >= 0 && off + block_size + 1 <= static_cast<int64_t>(bytes.size()),
             "window at {} of {} bytes over {} bytes", off, block_size + 1, bytes.size());
    for (int64_t t = 0; t < block_size; ++t) {
      x[r * block_size + t] = bytes[off + t];
      y[r * block_size + t] = bytes[off + t + 1];
    }
  }
  return batch;
}

void to_json(nlohmann::json& json, const WindowSamplerState& state) {
  json = {{"step", state.step}, {"rng_state", state.rng_state}};
}

void from_json(const nlohmann::json& json, WindowSamplerState& state) {
  constexpr std::string_view what = "window sampler";
  state.step = int_from_json(json, "step", what);
  if (!json.contains("rng_state")) fail("{}: state {} has no 'rng_state'", what, json.dump());
  state.rng_state = rng_state_from_json(json["rng_state"], what);
}

WindowSampler::WindowSampler(std::span<const uint8_t> train, int64_t batch_size, int64_t block_size,
                             uint64_t seed)
    : train_(train), batch_(batch_size), block_(block_size), rng_(seed) {
  if (batch_size < 1) fail("window sampler: batch size {} is invalid, expected >= 1", batch_size);
  if (block_size < 1) fail("window sampler: block size {} is invalid, expected >= 1", block_size);
  if (static_cast<int64_t>(train.size()) < block_size + 1)
    fail(
        "window sampler: training text of {} bytes is too short for block size {}, expected at "
        "least {} bytes",
        train.size(), block_size, block_size + 1);
}

std::vector<int64_t> WindowSampler::next_offsets() {
  const uint64_t starts = train_.size() - static_cast<uint64_t>(block_);  // n - T
  std::vector<int64_t> offsets(static_cast<size_t>(batch_));
  for (int64_t& off : offsets) off = static_cast<int64_t>(rng_.below(starts));
  ++step_;
  return offsets;
}

TokenBatch WindowSampler::next_batch() { return make_windows(train_, next_offsets(), block_); }

void WindowSampler::set_state(const WindowSamplerState& state) {
  if (state.step < 0) fail("window sampler: state step {} is invalid, expected >= 0", state.step);
  rng_.set_state(state.rng_state);
  step_ = state.step;
}

ValidationWindows::ValidationWindows(std::span<const uint8_t> val, int64_t batch_size,
                                     int64_t block_size, int64_t max_batches)
    : val_(val), block_(block_size) {
  if (batch_size < 1)
    fail("validation windows: batch size {} is invalid, expected >= 1", batch_size);
  if (block_size < 1)
    fail("validation windows: block size {} is invalid, expected >= 1", block_size);
  if (static_cast<int64_t>(val.size()) < block_size + 1)
    fail(
        "validation windows: validation text of {} bytes is too short for block size {}, "
        "expected at least {} bytes",
        val.size(), block_size, block_size + 1);
  const int64_t windows = (static_cast<int64_t>(val.size()) - 1) / block_size;  // W >= 1
  if (windows < batch_size) {
    rows_ = windows;
    batches_ = 1;
  } else {
    rows_ = batch_size;
    batches_ = windows / batch_size;
    if (max_batches > 0) batches_ = std::min(batches_, max_batches);
  }
}

std::vector<int64_t> ValidationWindows::offsets(int64_t index) const {
  PX_CHECK(index >= 0 && index < batches_, "validation batch {} of {}", index, batches_);
  std::vector<int64_t> out(static_cast<size_t>(rows_));
  for (int64_t r = 0; r < rows_; ++r) out[r] = (index * rows_ + r) * block_;
  return out;
}

TokenBatch ValidationWindows::batch(int64_t index) const {
  return make_windows(val_, offsets(index), block_);
}

}  // namespace px
