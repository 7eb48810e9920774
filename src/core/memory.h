// Accounting of tensor storage: bytes live now and the peak since the last
// reset, for the whole process and per MemoryAccount. In-process ranks are
// threads of one process, so each rank charges its allocations to its own
// account (MemoryAccountScope on its threads) and the executor reports the
// rank's peak from it. Only tensor storage is counted (not the allocator's
// or BLAS's own buffers).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace px {

struct MemoryStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
};

// The tensor bytes one rank holds. An allocation remembers the account it
// was charged to, so a free on another thread credits the right one; an
// account therefore lives as long as the process (new_memory_account), as
// a tensor may outlive the rank that made it.
class MemoryAccount {
 public:
  MemoryStats stats() const { return {live_.load(), peak_.load()}; }
  // Starts a new peak window: peak := live.
  void reset_peak() { peak_.store(live_.load()); }
  void charge(int64_t bytes);

 private:
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
};

// A fresh account that is never freed (a few bytes per rank and run).
MemoryAccount* new_memory_account();

// The process's account (every allocation is charged to it as well).
MemoryStats memory_stats();
void reset_peak_memory();

// The account this thread's allocations are charged to (nullptr: only the process's).
MemoryAccount* current_memory_account();

// Charges this thread's allocations to `account` while it lives.
class MemoryAccountScope {
 public:
  explicit MemoryAccountScope(MemoryAccount* account);
  ~MemoryAccountScope();
  MemoryAccountScope(const MemoryAccountScope&) = delete;
  MemoryAccountScope& operator=(const MemoryAccountScope&) = delete;

 private:
  MemoryAccount* previous_;
};

// 64-byte aligned allocation that updates the stats. Used by Tensor storage.
void* tracked_alloc(size_t bytes);
void tracked_free(void* ptr, size_t bytes);

}  // namespace px
