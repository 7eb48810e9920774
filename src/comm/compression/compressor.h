// GradientCompressor: the allreduce (sum) of one gradient tensor or bucket
// with lossy compression and error feedback, for data-parallel training.
// One per tensor (or bucket), the same on every rank: it owns this rank's
// error-feedback residual and, for PowerSGD, the warm-start Q. See
// docs/compression.md for each method's wire format and bytes on the wire.
//
//   auto spec = compression::Spec::parse("topk:0.01");
//   compression::GradientCompressor fc1(spec, 204800, 128, 1600, /*seed=*/7);
//   WireStats wire = fc1.allreduce_sum(world, grad, step);  // grad: sum over ranks
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/compression/spec.h"

namespace px::comm::compression {

namespace detail {
class PowerSgd;
}

// Bytes of one allreduce_sum call on this rank.
struct WireStats {
  uint64_t bytes_sent = 0;   // bytes this rank handed to the transport
  uint64_t dense_bytes = 0;  // what a float32 ring allreduce would send: 2(p-1)/p · 4n
  WireStats& operator+=(const WireStats& other) {
    bytes_sent += other.bytes_sent;
    dense_bytes += other.dense_bytes;
    return *this;
  }
  // dense_bytes / bytes_sent (0 when nothing was sent).
  double reduction() const {
    return bytes_sent == 0 ? 0.0 : static_cast<double>(dense_bytes) / static_cast<double>(bytes_sent);
  }
  bool operator==(const WireStats&) const = default;
};

class GradientCompressor {
 public:
  // Named float vectors of the state a checkpoint must keep (per rank: the
  // residual differs between ranks; Q is the same on all).
  using State = std::vector<std::pair<std::string, std::vector<float>>>;

  // count elements, seen as a (rows, cols) row-major matrix (rows·cols ==
  // count; PowerSGD needs it, the other methods ignore it). seed draws
  // PowerSGD's first Q and int8's rounding noise and must be equal on every
  // rank (the rank is mixed in where draws must differ).
  GradientCompressor(Spec spec, int64_t count, int64_t rows, int64_t cols, uint64_t seed);
  // A vector (or a flat bucket): rows = 1, cols = count.
  GradientCompressor(Spec spec, int64_t count, uint64_t seed)
      : GradientCompressor(spec, count, 1, count, seed) {}
  ~GradientCompressor();
  GradientCompressor(GradientCompressor&&) noexcept;
  GradientCompressor& operator=(GradientCompressor&&) noexcept;

  // Collective over comm. grad holds this rank's summand (grad.size() ==
  // count); on return it holds the sum of every rank's compressed
  // contribution, bitwise identical on every rank. With error feedback the
  // contribution is compress(grad + residual) and the residual becomes what
  // was left out. `step` (equal on every rank) varies the rounding noise.
  // The first call checks that every rank built the same compressor (spec,
  // shape, seed) and fails with both descriptions if not. Not thread-safe:
  // one call at a time per compressor.
  WireStats allreduce_sum(Communicator& comm, std::span<float> grad, uint64_t step);

  const Spec& spec() const { return spec_; }
  int64_t count() const { return count_; }
  // Error feedback's residual (empty when the spec keeps none).
  std::span<const float> residual() const { return residual_; }
  // Whether PowerSGD compresses this shape (vectors and tiny matrices go dense).
  bool low_rank() const;

  // "residual" (count floats, when error feedback is on) and "powersgd.q"
  // ((r, cols) floats, PowerSGD on a matrix).
  State state() const;
  // Replaces the state with a saved one; throws px::Error naming the entry
  // when names or sizes do not match this compressor.
  void load_state(const State& state);

 private:
  void check_agreement(Communicator& comm, WireStats& wire);
  uint64_t run_dense_half(Communicator& comm, std::span<float> x);
  uint64_t run_quantized(Communicator& comm, std::span<float> x, uint64_t step);
  uint64_t run_sparse(Communicator& comm, std::span<float> x);

  Spec spec_;
  int64_t count_, rows_, cols_;
  uint64_t seed_;
  bool checked_ = false;
  std::vector<float> residual_;
  std::unique_ptr<detail::PowerSgd> powersgd_;
  std::vector<uint8_t> payload_;  // this rank's encoded contribution (reused)
  std::vector<float> decoded_;    // scratch: one decoded contribution
};

}  // namespace px::comm::compression
