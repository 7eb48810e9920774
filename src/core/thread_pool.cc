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
// count down. One job at a time (kernels are called from one thread per rank;
// ranks of the in-process transport each call with their own pool disabled by
// setting threads to 1, or serialize through the mutex).
class Pool {
 public:
  ~Pool() { resize(0); }

  void resize(int workers) {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      ++generation_;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    stop_ = false;
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { loop(i + 1); });
  }

  int workers() const { return static_cast<int>(threads_.size()); }

  void run(int64_t begin, int64_t end, int chunks, const std::function<void(int64_t, int64_t)>& body) {
    std::lock_guard job_lock(job_mutex_);
    {
      std::lock_guard lock(mutex_);
      body_ = &body;
      begin_ = begin;
      end_ = end;
      chunks_ = chunks;
      pending_ = chunks - 1;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    run_chunk(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
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

  void loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        if (index >= chunks_ || body_ == nullptr) continue;
      }
      run_chunk(index);
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex job_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t begin_ = 0, end_ = 0;
  int chunks_ = 1;
  int pending_ = 0;
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
