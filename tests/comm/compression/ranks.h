// Helpers for multi-rank compression tests: run a body on p in-process ranks
// and collect each rank's vectors; deterministic per-rank gradients.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/backends.h"
#include "core/rng.h"

namespace px::comm::compression::testing {

// A gradient-like vector for (rank, step): a shared drift plus per-rank
// noise, so ranks agree on a direction but not on the values.
inline std::vector<float> gradient(int64_t n, int rank, uint64_t step, uint64_t seed = 1) {
  Rng drift(seed), noise(splitmix64(seed * 1000003 + step) ^ splitmix64(rank + 17));
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i)
    g[i] = 0.01f * static_cast<float>(0.3 * drift.normal() + noise.normal());
  return g;
}

// Runs body(comm) on `ranks` in-process ranks (timeout 30 s) and rethrows
// the first rank's error.
inline void on_ranks(int ranks, const std::function<void(Communicator&)>& body) {
  run_inproc(ranks, body, {.communicator = {.timeout = std::chrono::milliseconds(30000)}});
}

}  // namespace px::comm::compression::testing
