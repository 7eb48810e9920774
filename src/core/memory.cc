#include "core/memory.h"

#include <malloc.h>

#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>

namespace px {
namespace {
MemoryAccount g_process;
thread_local MemoryAccount* t_account = nullptr;
// The allocation's account sits in a header before the tensor's bytes; the
// header is one alignment unit so the bytes stay 64-byte aligned.
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

void MemoryAccount::charge(int64_t bytes) {
  const int64_t live = live_.fetch_add(bytes) + bytes;
  int64_t peak = peak_.load();
  while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
  }
}

MemoryAccount* new_memory_account() {
  // Accounts live as long as the process (a tensor may outlive its rank and
  // credit its account when freed), held by a registry that is never
  // destroyed: frees may still come while the process exits, and the
  // accounts stay reachable (not a leak to LeakSanitizer). A deque never
  // moves what it holds.
  static std::mutex mutex;
  static auto* accounts = new std::deque<MemoryAccount>();
  std::lock_guard lock(mutex);
  return &accounts->emplace_back();
}

MemoryStats memory_stats() { return g_process.stats(); }
void reset_peak_memory() { g_process.reset_peak(); }

MemoryAccount* current_memory_account() { return t_account; }

MemoryAccountScope::MemoryAccountScope(MemoryAccount* account) : previous_(t_account) { t_account = account; }
MemoryAccountScope::~MemoryAccountScope() { t_account = previous_; }

void* tracked_alloc(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  auto* block = static_cast<char*>(std::aligned_alloc(kAlignment, kAlignment + rounded));
  if (block == nullptr) throw std::bad_alloc();
  *reinterpret_cast<MemoryAccount**>(block) = t_account;
  g_process.charge(static_cast<int64_t>(bytes));
  if (t_account) t_account->charge(static_cast<int64_t>(bytes));
  return block + kAlignment;
}

void tracked_free(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  char* block = static_cast<char*>(ptr) - kAlignment;
  MemoryAccount* account = *reinterpret_cast<MemoryAccount**>(block);
  g_process.charge(-static_cast<int64_t>(bytes));
  if (account) account->charge(-static_cast<int64_t>(bytes));
  std::free(block);
}

}  // namespace px
