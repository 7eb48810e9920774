// CommEngine: a progress thread over one group that runs queued collectives
// (gradient allreduces, ZeRO reduce-scatters and allgathers, codec exchanges)
// while the caller keeps computing; a rank has one per axis whose
// collectives overlap compute (runtime/executor/collective_lanes.h). The
// most urgent job goes first; with slicing (P3) big jobs run as slices, and
// a more urgent job submitted later runs before an earlier job's remaining
// slices. See docs/comm_engine.md.
//
// Contract: every rank submits the same jobs (kind, name, size, priority) in
// the same order; job k is the k-th submission everywhere. Before each slice
// the ranks agree on which jobs all of them have submitted and pick the same
// one, so the order of collectives is identical on every rank whatever the
// timing. A rank that submits a different job gets a px::Error on every rank.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "comm/collectives.h"
#include "comm/communicator.h"

namespace px::comm {

struct EngineJob;  // comm/engine/job.h

// Microseconds since a process-wide epoch on a steady clock: the clock of
// TraceEvent, for callers that put their compute on the same timeline.
double now_us();

struct EngineOptions {
  // 0: every job runs whole. > 0: allreduce, reduce_scatter and allgather jobs
  // run as slices of about this many bytes, and jobs may preempt each other
  // at slice boundaries (P3). Must be equal on all ranks (checked).
  int64_t slice_bytes = 0;
  // Record one TraceEvent per slice run (take_trace()).
  bool trace = false;
  // Algorithm for the engine's collectives. Over a bandwidth-limited link
  // (InprocOptions::link_gbps) pick ring or halving_doubling: the cost model
  // does not know the limit.
  CollectiveOptions collective = {};
  // Nice value of the progress thread (Linux; needs CAP_SYS_NICE to go below
  // 0, silently kept at the caller's otherwise). It sleeps most of the time;
  // when ranks outnumber cores and compute saturates them, a higher priority
  // lets its wake-ups preempt compute instead of queueing behind it, as a
  // NIC would not wait for the CPU (docs/comm_engine.md).
  int progress_nice = -10;
  bool operator==(const EngineOptions&) const = default;
};

// One slice (or whole job) as run by the progress thread.
struct TraceEvent {
  std::string name;  // the job's name
  int64_t job = 0;   // JobId
  int priority = 0;
  int slice = 0;  // index of this slice, 0..slices-1
  int slices = 1;
  double start_us = 0;  // now_us() clock
  double duration_us = 0;
  int64_t bytes = 0;  // payload bytes of this slice (this rank's buffer)
};

class CommEngine {
 public:
  using JobId = int64_t;  // submission index, equal on every rank

  // Collective over `group`: splits a private communicator (its tags never mix
  // with the caller's, who may keep using `group` and other communicators on
  // the same transport from its own thread) and starts the progress thread.
  CommEngine(Communicator& group, EngineOptions options = {});
  // Runs every submitted job to completion (or failure), then joins. Never throws.
  ~CommEngine();
  CommEngine(const CommEngine&) = delete;
  CommEngine& operator=(const CommEngine&) = delete;

  // Each call queues a job and returns at once. Lower `priority` is more
  // urgent (P3: the layer's index in forward order, so layer 0 goes first);
  // equal priorities run in submission order. `algorithm` is the job's
  // (automatic: EngineOptions::collective's, chosen per slice by the cost
  // model); the servers and node size are EngineOptions::collective's. Buffers must stay valid and
  // untouched by the caller until wait() for the job returns.

  // Bytes this rank's jobs have sent so far (their own communicator's
  // count, which the group it was split from does not see).
  uint64_t bytes_sent() const { return comm_.bytes_sent(); }

  // In place: data holds this rank's contribution and receives the result.
  JobId allreduce(std::span<float> data, int priority, std::string name,
                  Reduction op = Reduction::sum, Algorithm algorithm = Algorithm::automatic);
  // input: n elements; output: block(n, size(), rank()) of the reduced result.
  JobId reduce_scatter(std::span<const float> input, std::span<float> output, int priority,
                       std::string name, Reduction op = Reduction::sum,
                       Algorithm algorithm = Algorithm::automatic);
  // input: block(n, size(), rank()) elements; output: all n.
  JobId allgather(std::span<const float> input, std::span<float> output, int priority,
                  std::string name, Algorithm algorithm = Algorithm::automatic);
  // Any exchange (e.g. a compression codec's): runs work(engine communicator)
  // on the progress thread, whole (never sliced). `bytes` is only reported in
  // the trace. work must not split the communicator.
  JobId submit(int priority, std::string name, std::function<void(Communicator&)> work,
               int64_t bytes = 0);

  // Blocks until the job is done; throws px::Error naming the job if it (or
  // an earlier failure that stopped the engine) failed.
  void wait(JobId id);
  // True once the job is done or failed (wait() then returns at once).
  bool finished(JobId id);
  // Waits for every job submitted so far; throws the first failure.
  void wait_all();

  // Slices run since the last call (needs EngineOptions::trace), in run order.
  std::vector<TraceEvent> take_trace();
  // Payload bytes of every slice run so far (this rank's buffers; the wire
  // bytes depend on the algorithm).
  int64_t payload_bytes() const;
  // Agreement rounds run so far (one tiny exchange each).
  int64_t agreement_rounds() const;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const EngineOptions& options() const { return options_; }

 private:
  JobId enqueue(std::shared_ptr<EngineJob> job);
  void progress_loop();
  void agree();           // one agreement round: advances agreed_
  void run_next_slice();  // the most urgent agreed unfinished job's next slice, if any
  // Fails every unfinished job (culprit: the job that failed, or -1) and
  // stops the engine: its ranks may now disagree on where they are.
  void stop_after_failure(const std::string& what, JobId culprit);

  Communicator comm_;  // the engine's own split
  EngineOptions options_;
  int rank_ = 0, size_ = 1;

  mutable std::mutex mutex_;
  std::condition_variable work_;  // progress thread: new job or stopping
  std::condition_variable done_;  // waiters: a job finished
  std::map<JobId, std::shared_ptr<EngineJob>> jobs_;  // submitted, not yet waited for
  JobId submitted_ = 0;
  int64_t unfinished_ = 0;  // submitted jobs not yet finished or failed
  bool stopping_ = false;
  std::string failure_;     // set once a job failed; the engine then stops
  std::deque<uint64_t> pending_signatures_;  // of jobs agreed_.. submitted_-1
  std::vector<TraceEvent> trace_;
  int64_t payload_bytes_ = 0;
  int64_t rounds_ = 0;

  // Progress thread only.
  JobId agreed_ = 0;  // jobs 0..agreed_-1 are submitted on every rank
  std::set<std::pair<int, JobId>> runnable_;  // agreed, unfinished: (priority, id)
  std::vector<float> staging_;                 // sliced reduce_scatter/allgather pieces

  std::thread thread_;
};

}  // namespace px::comm
