#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace px {
namespace {

thread_local bool t_inside_pool = false;

// Workers wait for a generation counter to change, run their chunk, and
// count down. A blocking wake-up costs tens of microseconds in a VM, and
// kernels of a training step follow each other microseconds apart, so
// workers spin for a while (kSpinIterations) before they sleep, and the
// caller spins while the last chunks finish. One job at a time.
constexpr int kSpinIterations = 20000;  // ~100-200 us of pause instructions

inline void cpu_relax() { __builtin_ia32_pause(); }

class Pool {
 public:
  ~Pool() { resize(0); }

  void resize(int workers) {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    stop_ = false;
    // A worker must not miss a job published before its thread first runs:
    // it starts from the generation current now, not from when it wakes.
    const uint64_t start = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i, start] { loop(i + 1, start); });
  }

  int workers() const { return static_cast<int>(threads_.size()); }

  void run(int64_t begin, int64_t end, int chunks, const std::function<void(int64_t, int64_t)>& body) {
    std::lock_guard job_lock(job_mutex_);
    body_ = &body;
    begin_ = begin;
    end_ = end;
    chunks_ = chunks;
    error_ = nullptr;
    pending_.store(chunks - 1, std::memory_order_relaxed);
    {
      std::lock_guard lock(mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    if (sleepers_.load(std::memory_order_acquire) > 0) wake_.notify_all();
    run_chunk(0);
    for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
      if (spin < kSpinIterations) cpu_relax();
      else std::this_thread::yield();
    }
    body_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void run_chunk(int index) {
    int64_t n = end_ - begin_;
    int64_t lo = begin_ + n * index / chunks_;
    int64_t hi = begin_ + n * (index + 1) / chunks_;
    if (lo >= hi) return;
    t_inside_pool = true;
    try {
      (*body_)(lo, hi);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    t_inside_pool = false;
  }

  void loop(int index, uint64_t seen) {
    for (;;) {
      int spin = 0;
      while (generation_.load(std::memory_order_acquire) == seen && spin < kSpinIterations) {
        cpu_relax();
        ++spin;
      }
      if (generation_.load(std::memory_order_acquire) == seen) {
        std::unique_lock lock(mutex_);
        sleepers_.fetch_add(1, std::memory_order_acq_rel);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_) return;
      if (index >= chunks_ || body_ == nullptr) continue;
      run_chunk(index);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::vector<std::thread> threads_;
  std::mutex job_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t begin_ = 0, end_ = 0;
  int chunks_ = 1;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p;
  return p;
}
std::atomic<int> g_threads{1};

}  // namespace

int num_threads() { return g_threads.load(); }

void set_num_threads(int threads) {
  if (threads < 1) fail("threads must be at least 1, got {}", threads);
  if (threads == g_threads.load()) return;
  g_threads.store(threads);
  pool().resize(threads - 1);
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body) {
  int64_t n = end - begin;
  if (n <= 0) return;
  int threads = g_threads.load();
  int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  int chunks = static_cast<int>(std::min<int64_t>(threads, max_chunks));
  if (chunks <= 1 || t_inside_pool || pool().workers() + 1 < chunks) {
    body(begin, end);
    return;
  }
  pool().run(begin, end, chunks, body);
}

}  // namespace px
