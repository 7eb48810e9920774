#include "core/memory.h"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <list>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define PX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PX_ASAN 1
#endif
#endif
#ifdef PX_ASAN
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

namespace px {
namespace {
MemoryAccount g_process;
thread_local MemoryAccount* t_account = nullptr;
// The allocation's account sits in a header before the tensor's bytes; the
// header is one alignment unit so the bytes stay 64-byte aligned.
constexpr size_t kAlignment = 64;

// A training step frees and asks again for the same activation sizes every
// step. Left to the system allocator, large blocks come from mmap and go
// back with munmap, so every step would fault in every activation's pages
// again. glibc is told to serve them from its heap and keep it (mallopt
// below): freed blocks are reused whatever size asks next. AddressSanitizer's
// allocator has no such cache for large blocks (each is an mmap), and a
// training step there spent more time in the kernel than in its kernels;
// under ASan the BlockCache keeps freed blocks of at least kCachedBytes by
// exact size for the next request of that size (2.6x faster steps there;
// in release glibc's heap, which also reuses a block for a smaller request,
// measured 12% faster than it). What the cache holds is bounded by the most
// tensor bytes the process has had live, or kCacheFloorBytes if more (a
// peak's worth, as glibc's untrimmed heap keeps); when full it releases the
// blocks cached longest ago. A cached block is
// poisoned: a tensor used after its free is still reported (as
// use-after-poison) until the block is handed out again.
//
// And one arena for every thread. A thread's own arena (glibc gives each
// thread one while they contend) grows in 64 MiB heaps, and a heap left
// wholly free is unmapped whatever the trim threshold. An in-process rank
// that loaded its data filled its first heap, so each step's tensors took a
// second heap that the step's last free unmapped: ~200 page faults a step
// and an MLP step on 2 ranks about 3x slower (3.8-4.7 ms against 1.2-1.7
// with one arena; the GPT's steps unchanged, 88-95 ms either way).
const bool g_heap_tuned = [] {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_ARENA_MAX, 1);
  return true;
}();

#ifdef PX_ASAN
constexpr bool kCacheBlocks = true;
#else
constexpr bool kCacheBlocks = false;
#endif
constexpr size_t kCachedBytes = size_t{64} << 10;
constexpr int64_t kCacheFloorBytes = int64_t{64} << 20;

class BlockCache {
 public:
  // A cached block of exactly `bytes` (header included), or nullptr.
  char* take(size_t bytes) {
    std::lock_guard lock(mutex_);
    auto found = by_size_.find(bytes);
    if (found == by_size_.end() || found->second.empty()) return nullptr;
    const auto entry = found->second.back();
    found->second.pop_back();
    char* block = entry->block;
    cached_bytes_ -= bytes;
    age_.erase(entry);
    ASAN_UNPOISON_MEMORY_REGION(block, bytes);
    return block;
  }

  // Keeps `block` for a later take(bytes); releases what no longer fits.
  void give(char* block, size_t bytes, size_t limit) {
    std::vector<char*> released;
    {
      std::lock_guard lock(mutex_);
      ASAN_POISON_MEMORY_REGION(block, bytes);
      by_size_[bytes].push_back(age_.insert(age_.end(), {block, bytes}));
      cached_bytes_ += bytes;
      while (cached_bytes_ > limit) {  // the oldest is the first of its size's list
        const Entry oldest = age_.front();
        auto& same_size = by_size_[oldest.bytes];
        same_size.erase(same_size.begin());
        age_.pop_front();
        cached_bytes_ -= oldest.bytes;
        ASAN_UNPOISON_MEMORY_REGION(oldest.block, oldest.bytes);
        released.push_back(oldest.block);
      }
    }
    for (char* b : released) std::free(b);
  }

 private:
  struct Entry {
    char* block;
    size_t bytes;
  };
  std::mutex mutex_;
  std::list<Entry> age_;  // oldest first
  std::unordered_map<size_t, std::vector<std::list<Entry>::iterator>> by_size_;  // each oldest first
  size_t cached_bytes_ = 0;
};

// Never destroyed: tensors are freed while the process exits, and what it
// holds stays reachable (not a leak to LeakSanitizer).
BlockCache& block_cache() {
  static auto* cache = new BlockCache();
  return *cache;
}
std::atomic<int64_t> g_most_live{0};  // the cache's bound

// The block's size, header included: what the cache is keyed by.
size_t block_bytes(size_t bytes) { return kAlignment + (bytes + kAlignment - 1) / kAlignment * kAlignment; }
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
  const size_t total = block_bytes(bytes);
  const bool cached = kCacheBlocks && total >= kCachedBytes;
  char* block = cached ? block_cache().take(total) : nullptr;
  if (block == nullptr) block = static_cast<char*>(std::aligned_alloc(kAlignment, total));
  if (block == nullptr) throw std::bad_alloc();
  *reinterpret_cast<MemoryAccount**>(block) = t_account;
  g_process.charge(static_cast<int64_t>(bytes));
  if (cached) {
    const int64_t live = g_process.stats().live_bytes;
    for (int64_t most = g_most_live.load(); live > most && !g_most_live.compare_exchange_weak(most, live);) {
    }
  }
  if (t_account) t_account->charge(static_cast<int64_t>(bytes));
  return block + kAlignment;
}

void tracked_free(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  char* block = static_cast<char*>(ptr) - kAlignment;
  MemoryAccount* account = *reinterpret_cast<MemoryAccount**>(block);
  g_process.charge(-static_cast<int64_t>(bytes));
  if (account) account->charge(-static_cast<int64_t>(bytes));
  const size_t total = block_bytes(bytes);
  if (kCacheBlocks && total >= kCachedBytes)
    block_cache().give(block, total, static_cast<size_t>(std::max(g_most_live.load(), kCacheFloorBytes)));
  else
    std::free(block);
}

}  // namespace px
