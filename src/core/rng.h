// Random numbers that are reproducible and checkpointable.
//  - Rng: xoshiro256** stream; its whole state is 4 words, saved in
//    checkpoints so a resumed run draws the same numbers.
//  - counter_uniform(seed, index): a stateless hash (splitmix64) for kernels
//    such as dropout, so element i's draw does not depend on thread count.
#pragma once

#include <array>
#include <cstdint>

namespace px {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next_u64();
  // Uniform in [0, 1).
  double uniform();
  // Standard normal (Box-Muller).
  double normal();
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n);

  std::array<uint64_t, 4> state() const { return state_; }
  void set_state(const std::array<uint64_t, 4>& state) { state_ = state; }

 private:
  std::array<uint64_t, 4> state_;
};

uint64_t splitmix64(uint64_t x);
// Uniform float in [0, 1) determined by (seed, index) alone.
inline float counter_uniform(uint64_t seed, uint64_t index) {
  return static_cast<float>(splitmix64(seed ^ splitmix64(index)) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace px
