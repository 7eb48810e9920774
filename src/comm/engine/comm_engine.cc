#include "comm/engine/comm_engine.h"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "comm/engine/agreement.h"
#include "comm/engine/job.h"
#include "core/error.h"
#include "core/memory.h"

namespace px::comm {
namespace {

Communicator split_private(Communicator& group) {
  return group.split(0, group.rank());
}

}  // namespace

double now_us() {
  static const auto epoch = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - epoch)
      .count();
}

CommEngine::CommEngine(Communicator& group, EngineOptions options)
    : comm_(split_private(group)), options_(options), rank_(comm_.rank()), size_(comm_.size()) {
  if (options_.slice_bytes < 0)
    fail("CommEngine: slice_bytes {} is negative; expected 0 (no slicing) or a size in bytes",
         options_.slice_bytes);
  // Collectives may split (hierarchical's node groups) or map shared memory on
  // first use; do both here, on the caller's thread, so the progress thread
  // never creates a context while the caller's thread splits its own groups.
  (void)comm_.shared_memory();
  if (size_ > 1) (void)comm_.node_groups(options_.collective.ranks_per_node);
  now_us();  // fix the epoch before any trace
  // The progress thread's allocations (compression, scratch) belong to the caller's rank.
  thread_ = std::thread([this, account = current_memory_account()] {
    MemoryAccountScope scope(account);
    progress_loop();
  });
}

CommEngine::~CommEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
}

CommEngine::JobId CommEngine::allreduce(std::span<float> data, int priority, std::string name,
                                        Reduction op, Algorithm algorithm) {
  auto job = std::make_shared<EngineJob>();
  job->kind = JobKind::allreduce;
  job->algorithm = algorithm;
  job->priority = priority;
  job->name = std::move(name);
  job->op = op;
  job->data = data;
  job->count = static_cast<int64_t>(data.size());
  return enqueue(std::move(job));
}

CommEngine::JobId CommEngine::reduce_scatter(std::span<const float> input, std::span<float> output,
                                             int priority, std::string name, Reduction op,
                                             Algorithm algorithm) {
  const int64_t n = static_cast<int64_t>(input.size());
  if (static_cast<int64_t>(output.size()) != block(n, size_, rank_).count)
    fail("CommEngine::reduce_scatter '{}': output has {} elements on rank {}, expected block({}, "
         "{}, {}) = {}",
         name, output.size(), rank_, n, size_, rank_, block(n, size_, rank_).count);
  auto job = std::make_shared<EngineJob>();
  job->kind = JobKind::reduce_scatter;
  job->algorithm = algorithm;
  job->priority = priority;
  job->name = std::move(name);
  job->op = op;
  job->data = output;
  job->input = input;
  job->count = n;
  return enqueue(std::move(job));
}

CommEngine::JobId CommEngine::allgather(std::span<const float> input, std::span<float> output,
                                        int priority, std::string name, Algorithm algorithm) {
  const int64_t n = static_cast<int64_t>(output.size());
  if (static_cast<int64_t>(input.size()) != block(n, size_, rank_).count)
    fail("CommEngine::allgather '{}': input has {} elements on rank {}, expected block({}, {}, "
         "{}) = {}",
         name, input.size(), rank_, n, size_, rank_, block(n, size_, rank_).count);
  auto job = std::make_shared<EngineJob>();
  job->kind = JobKind::allgather;
  job->algorithm = algorithm;
  job->priority = priority;
  job->name = std::move(name);
  job->data = output;
  job->input = input;
  job->count = n;
  return enqueue(std::move(job));
}

CommEngine::JobId CommEngine::submit(int priority, std::string name,
                                     std::function<void(Communicator&)> work, int64_t bytes) {
  auto job = std::make_shared<EngineJob>();
  job->kind = JobKind::custom;
  job->priority = priority;
  job->name = std::move(name);
  job->work = std::move(work);
  job->custom_bytes = bytes;
  return enqueue(std::move(job));
}

CommEngine::JobId CommEngine::enqueue(std::shared_ptr<EngineJob> job) {
  plan_slices(*job, options_.slice_bytes, size_);
  std::unique_lock lock(mutex_);
  job->id = submitted_++;
  if (!failure_.empty()) {
    job->error = fmt::format("CommEngine job #{} {} was not run: {}", job->id, job->describe(),
                             failure_);
  } else {
    ++unfinished_;
  }
  pending_signatures_.push_back(job->signature);
  jobs_.emplace(job->id, job);
  lock.unlock();
  work_.notify_one();
  return job->id;
}

bool CommEngine::finished(JobId id) {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(id);
  return it == jobs_.end() || it->second->done || !it->second->error.empty();
}

void CommEngine::wait(JobId id) {
  std::unique_lock lock(mutex_);
  PX_CHECK(id >= 0 && id < submitted_, "CommEngine::wait: job {} was never submitted", id);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;  // already waited for
  std::shared_ptr<EngineJob> job = it->second;
  done_.wait(lock, [&] { return job->done || !job->error.empty(); });
  jobs_.erase(id);
  if (!job->error.empty()) throw Error(job->error);
}

void CommEngine::wait_all() {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return unfinished_ == 0; });
  std::string first_error;
  for (auto& [id, job] : jobs_)
    if (first_error.empty() && !job->error.empty()) first_error = job->error;
  jobs_.clear();
  if (!first_error.empty()) throw Error(first_error);
}

std::vector<TraceEvent> CommEngine::take_trace() {
  std::lock_guard lock(mutex_);
  return std::exchange(trace_, {});
}

int64_t CommEngine::payload_bytes() const {
  std::lock_guard lock(mutex_);
  return payload_bytes_;
}

int64_t CommEngine::agreement_rounds() const {
  std::lock_guard lock(mutex_);
  return rounds_;
}

void CommEngine::progress_loop() {
  // This thread sleeps whenever it waits (agreement rounds, limited links):
  // a 1 ns timer slack makes those sleeps end ~30 us late instead of ~100 us.
  prctl(PR_SET_TIMERSLACK, 1UL);
  if (options_.progress_nice != 0)
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), options_.progress_nice);
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      work_.wait(lock, [&] { return unfinished_ > 0 || stopping_; });
      if (unfinished_ == 0) return;  // stopping, and everything ran
    }
    try {
      // A rank comes here only with a job of its own unfinished; so does the
      // rank with the fewest submissions, whose unfinished job is then agreed:
      // every completed round lets at least one slice run. One round, then
      // at most one slice: comm::announcement_rounds, which the lowering
      // stamps and the simulator costs, counts on this.
      agree();
    } catch (const std::exception& error) {
      stop_after_failure(error.what(), -1);
      return;
    }
    const JobId next = runnable_.empty() ? -1 : runnable_.begin()->second;
    try {
      run_next_slice();
    } catch (const std::exception& error) {
      stop_after_failure(error.what(), next);
      return;
    } catch (...) {
      stop_after_failure("unknown exception", next);
      return;
    }
  }
}

void CommEngine::agree() {
  Announcement mine;
  {
    std::lock_guard lock(mutex_);
    mine.submitted = submitted_;
    for (int i = 0; i < Announcement::kWindow && i < static_cast<int>(pending_signatures_.size());
         ++i)
      mine.signatures[i] = pending_signatures_[i];
    ++rounds_;
  }
  std::vector<Announcement> all = exchange_announcements(comm_, mine);
  auto describe = [&](int64_t id) {
    std::lock_guard lock(mutex_);
    auto it = jobs_.find(id);
    return it == jobs_.end() ? std::string("?") : it->second->describe();
  };
  const int64_t agreed = agree_on_jobs(all, agreed_, rank_, describe);
  std::lock_guard lock(mutex_);
  for (JobId id = agreed_; id < agreed; ++id) {
    pending_signatures_.pop_front();
    auto it = jobs_.find(id);
    // A job cannot finish (nor be waited for) before it is agreed.
    PX_CHECK(it != jobs_.end(), "agreed job {} is unknown", id);
    runnable_.emplace(it->second->priority, id);
  }
  agreed_ = agreed;
}

void CommEngine::run_next_slice() {
  if (runnable_.empty()) return;
  const JobId id = runnable_.begin()->second;
  std::shared_ptr<EngineJob> job;
  {
    std::lock_guard lock(mutex_);
    job = jobs_.at(id);
  }
  const int slice = job->next_slice;
  const double start = now_us();
  // The engine's algorithm where the job's collective implements it (a
  // custom job's work takes its own).
  const Collective kind = job->kind == JobKind::reduce_scatter ? Collective::reduce_scatter
                          : job->kind == JobKind::allgather    ? Collective::allgather
                                                               : Collective::allreduce;
  CollectiveOptions options = options_for(options_.collective, kind);
  if (job->algorithm != Algorithm::automatic) options.algorithm = job->algorithm;
  const int64_t bytes = run_slice(*job, slice, comm_, options, staging_);
  const double end = now_us();
  {
    std::lock_guard lock(mutex_);
    payload_bytes_ += bytes;
    if (options_.trace)
      trace_.push_back(TraceEvent{.name = job->name,
                                  .job = id,
                                  .priority = job->priority,
                                  .slice = slice,
                                  .slices = job->slices,
                                  .start_us = start,
                                  .duration_us = end - start,
                                  .bytes = bytes});
    job->next_slice = slice + 1;
    if (job->next_slice < job->slices) return;
    job->done = true;
    --unfinished_;
  }
  runnable_.erase(runnable_.begin());
  done_.notify_all();
}

void CommEngine::stop_after_failure(const std::string& what, JobId culprit) {
  {
    std::lock_guard lock(mutex_);
    auto culprit_it = jobs_.find(culprit);
    std::string culprit_text =
        culprit_it == jobs_.end()
            ? std::string()
            : fmt::format("job #{} {}", culprit, culprit_it->second->describe());
    failure_ = culprit_text.empty()
                   ? fmt::format("the engine stopped on rank {}: {}", rank_, what)
                   : fmt::format("the engine stopped on rank {} after {} failed: {}", rank_,
                                 culprit_text, what);
    for (auto& [id, job] : jobs_) {
      if (job->done || !job->error.empty()) continue;
      job->error = id == culprit ? fmt::format("CommEngine job #{} {} failed on rank {}: {}", id,
                                               job->describe(), rank_, what)
                                 : fmt::format("CommEngine job #{} {} was not run: {}", id,
                                               job->describe(), failure_);
    }
    unfinished_ = 0;
    runnable_.clear();
  }
  done_.notify_all();
}

}  // namespace px::comm
