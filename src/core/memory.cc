#include "core/memory.h"

#include <atomic>
#include <malloc.h>

#include <cstdlib>
#include <new>

namespace px {
namespace {
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
constexpr size_t kAlignment = 64;

// A training step frees and reallocates the same activation sizes every
// step. glibc serves large blocks with mmap and returns them with munmap, so
// each step would pay page faults for every activation again; keeping large
// blocks in the heap (and not trimming it) lets the next step reuse them.
const bool g_heap_tuned = [] {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return true;
}();
}  // namespace

MemoryStats memory_stats() { return {g_live.load(), g_peak.load()}; }

void reset_peak_memory() { g_peak.store(g_live.load()); }

void* tracked_alloc(size_t bytes) {
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (p == nullptr) throw std::bad_alloc();
  int64_t live = g_live.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}

void tracked_free(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  g_live.fetch_sub(static_cast<int64_t>(bytes));
  std::free(ptr);
}

}  // namespace px
