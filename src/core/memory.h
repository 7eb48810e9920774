// Process-wide accounting of tensor storage: bytes live now and the peak since
// the last reset. The executor reports peak tensor memory from it; it counts
// only tensor storage (not the allocator's or BLAS's own buffers).
#pragma once

#include <cstddef>
#include <cstdint>

namespace px {

struct MemoryStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
};

MemoryStats memory_stats();
// Starts a new peak window: peak := live.
void reset_peak_memory();

// 64-byte aligned allocation that updates the stats. Used by Tensor storage.
void* tracked_alloc(size_t bytes);
void tracked_free(void* ptr, size_t bytes);

}  // namespace px
