// Seeded, reproducible, checkpointable batch samplers of global batches
// (which rows of one a rank trains on is the data axis' split,
// parallel/row_split.h).
//  - EpochSampler: classification datasets; a fresh random permutation per
//    epoch, batches of B indices, the last partial batch kept (or, with
//    drop_last, left out, as PyTorch's DataLoader conventions go).
//  - WindowSampler: a byte corpus; B random windows of T+1 bytes per batch.
//  - ValidationWindows: fixed, evenly spaced windows of the validation split,
//    the same on every run and system.
// docs/data.md specifies the exact order so another framework can reproduce it.
//
// Legend: N = dataset size, B = global batch size, T = block (context) size,
// R = world size (ranks), b = rows of one rank's shard.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace px {

// (rows.size(), ...) copy of the given rows of `source` (any dtype, rank >= 1).
Tensor gather_rows(const Tensor& source, std::span<const int64_t> rows);

// ---------------------------------------------------------------- epochs

// Where an EpochSampler is; saving it in a checkpoint and restoring it makes
// the sampler continue with exactly the batches it would have produced.
struct EpochSamplerState {
  int64_t epoch = 0;     // the current epoch, counting from 0
  int64_t position = 0;  // examples of the current epoch already served, in [0, N]
  // Generator state just before the current epoch's permutation was drawn.
  std::array<uint64_t, 4> rng_state{};
  bool operator==(const EpochSamplerState&) const = default;
};
void to_json(nlohmann::json& json, const EpochSamplerState& state);
void from_json(const nlohmann::json& json, EpochSamplerState& state);  // px::Error if malformed

struct EpochBatch {
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;    // 0 .. batches_per_epoch() - 1
  bool last_in_epoch = false;    // the epoch ends with this batch
  int64_t global_rows = 0;       // rows of the whole global batch: B, or less for the last batch
  std::vector<int64_t> indices;  // (b) dataset indices: the batch's, or this rank's shard of them
};

class EpochSampler {
 public:
  // Epoch e's order is a Fisher-Yates shuffle drawn from one Rng(seed) stream
  // that continues across epochs (see docs/data.md). `drop_last`: an epoch
  // ends after its last full batch; the N mod B examples left over are not
  // served that epoch.
  EpochSampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, bool drop_last = false);

  // The next global batch: the next min(B, N - position) indices of the
  // current permutation; when the epoch is exhausted, first starts the next.
  EpochBatch next_batch();

  int64_t dataset_size() const { return size_; }
  int64_t batch_size() const { return batch_; }
  // ceil(N / B), or floor(N / B) with drop_last.
  int64_t batches_per_epoch() const { return (epoch_end_ + batch_ - 1) / batch_; }
  // Permutation of the current epoch: (N) indices.
  const std::vector<int64_t>& permutation() const { return permutation_; }

  EpochSamplerState state() const;
  // Restores a state from state() of a sampler with the same N and B
  // (px::Error if the state cannot belong to one).
  void set_state(const EpochSamplerState& state);

 private:
  void start_epoch();  // draws permutation_ from rng_, recording epoch_rng_state_
  int64_t size_;
  int64_t batch_;
  int64_t epoch_end_;  // examples an epoch serves: N, or N - N mod B with drop_last
  Rng rng_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::array<uint64_t, 4> epoch_rng_state_{};
  std::vector<int64_t> permutation_;
};

// ---------------------------------------------------------------- text

struct TokenBatch {
  Tensor inputs;   // (b, T) i32: bytes [off, off + T)
  Tensor targets;  // (b, T) i32: bytes [off + 1, off + T + 1)
};

// Inputs and targets for windows starting at `offsets` of `bytes`; each
// offset must satisfy offset + T + 1 <= bytes.size().
TokenBatch make_windows(std::span<const uint8_t> bytes, std::span<const int64_t> offsets,
                        int64_t block_size);

struct WindowSamplerState {
  int64_t step = 0;  // batches drawn so far
  std::array<uint64_t, 4> rng_state{};
  bool operator==(const WindowSamplerState&) const = default;
};
void to_json(nlohmann::json& json, const WindowSamplerState& state);
void from_json(const nlohmann::json& json, WindowSamplerState& state);  // px::Error if malformed

class WindowSampler {
 public:
  // `train` (n bytes, n >= T + 1) must outlive the sampler.
  WindowSampler(std::span<const uint8_t> train, int64_t batch_size, int64_t block_size,
                uint64_t seed);

  // Offsets of the next global batch: for b = 0 .. B-1 in order,
  // offset[b] = rng.below(n - T). Advances the step.
  std::vector<int64_t> next_offsets();
  TokenBatch next_batch();  // (B, T)
  // Windows of the corpus at `offsets` (some of next_offsets()): (b, T).
  TokenBatch windows(std::span<const int64_t> offsets) const { return make_windows(train_, offsets, block_); }

  int64_t batch_size() const { return batch_; }
  int64_t block_size() const { return block_; }
  WindowSamplerState state() const { return {.step = step_, .rng_state = rng_.state()}; }
  void set_state(const WindowSamplerState& state);

 private:
  std::span<const uint8_t> train_;
  int64_t batch_;
  int64_t block_;
  Rng rng_;
  int64_t step_ = 0;
};

// The validation set of a byte corpus: windows k = 0, 1, ... start at k * T,
// W = (n - 1) / T of them (non-overlapping inputs, targets shifted by one);
// batch j holds windows [j * B, (j + 1) * B). There are
// min(max_batches, W / B) full batches (all W / B when max_batches <= 0), or,
// when W < B, a single batch of all W windows.
class ValidationWindows {
 public:
  // `val` (n >= T + 1 bytes) must outlive this object.
  ValidationWindows(std::span<const uint8_t> val, int64_t batch_size, int64_t block_size,
                    int64_t max_batches);
  int64_t num_batches() const { return batches_; }
  int64_t windows_per_batch() const { return rows_; }
  std::vector<int64_t> offsets(int64_t index) const;  // (rows) start offsets
  TokenBatch batch(int64_t index) const;              // (rows, T)

 private:
  std::span<const uint8_t> val_;
  int64_t rows_;
  int64_t block_;
  int64_t batches_;
};

}  // namespace px
