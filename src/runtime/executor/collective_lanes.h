// The collectives of a Program on this rank, on the lanes the Program names
// (parallel::Lane): a progress lane per mesh axis whose collectives overlap
// compute, each a CommEngine (comm/engine) over the communicator those
// collectives name (the data path joined with the context axis, a
// tensor-parallel axis, ...), and inline on the calling thread for the
// rest. Per instruction, its engine job this step; a job the next step's
// deferred instructions wait for (P3) is carried over the step's end.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <vector>

#include "comm/engine/comm_engine.h"
#include "parallel/execution.h"
#include "parallel/program.h"
#include "runtime/executor/buffer_pool.h"
#include "runtime/executor/gradient_codecs.h"
#include "runtime/executor/rank_groups.h"
#include "runtime/executor/trace.h"

namespace px {

// The options instruction `instr`'s collective of kind `kind` runs with:
// the program's as that kind takes them (comm::options_for), with the
// algorithm the lowering resolved for it.
comm::CollectiveOptions options_of(const parallel::Program& program, const parallel::Instr& instr, comm::Collective kind);

class CollectiveLanes final : public RunningJobs {
 public:
  using JobId = comm::CommEngine::JobId;

  // An engine per progress lane of `program` whose group has more than one
  // rank, when options.overlap (else every collective runs inline).
  CollectiveLanes(const parallel::Program& program, RankGroups& groups, const parallel::ExecutionOptions& options);

  // Another program of the run is active: its lanes must be the first one's.
  void bind(const parallel::Program& program, RankGroups& groups);
  // A step begins: every job forgotten but, when `keep_carried`, those
  // `carried` marks (this step's deferred instructions wait for them).
  void begin_step(const std::vector<bool>& carried, bool keep_carried);

  // Instruction `id`'s collective over `group`, queued on its lane's engine
  // (returns true) or run here. `exchange`: a codec's (GradientCodecs),
  // instead of the plain collective.
  bool run(const parallel::Program& program, int id, const parallel::Collective& op, BufferPool& buffers,
           comm::Communicator& group, std::function<void(comm::Communicator&)> exchange);

  // Instruction `id`'s exchange `work` (a Route's): queued on its lane's
  // engine as a job run whole (returns true), or run here over `group`.
  // `bytes` names its size in the trace.
  bool submit(const parallel::Program& program, int id, std::function<void(comm::Communicator&)> work,
              comm::Communicator& group, int64_t bytes);

  bool has_job(int id) const { return id >= 0 && job_[static_cast<size_t>(id)] >= 0; }
  bool finished(int id) const;  // it had a job this step, now done
  bool running(int id) const override { return has_job(id) && !finished(id); }
  // Waits for instruction `id`'s job, if it has one (px::Error if it failed).
  void wait(int id);
  void wait_all();  // every engine's every job
  // The engines' slices run since the last call, as trace records tagged
  // with their instructions; staged inputs of finished jobs released.
  void collect(std::vector<TraceRecord>* trace, int64_t step);
  // Staged allgather inputs whose jobs are done, released (the loop calls
  // it after every instruction, so a copy lives as long as its gather).
  void release_staging();
  // Bytes this rank's engines sent on mesh axis `axis` so far.
  uint64_t bytes_sent(int axis) const;

 private:
  struct Lane {
    int axis = -1;
    comm::Communicator* group = nullptr;
    std::unique_ptr<comm::CommEngine> engine;
  };
  // The lanes of `program` (axis and group per progress lane), and per
  // instruction its lane's index (-1: inline).
  static std::vector<int> lanes_of(const parallel::Program& program, RankGroups& groups, std::vector<Lane>& lanes);
  JobId dense(const parallel::Collective& op, const parallel::Instr& instr, const comm::CollectiveOptions& collective,
              std::span<float> input, comm::Buffer output, int lane, bool staged, comm::Communicator& group);
  bool done(const std::pair<int, JobId>& job) const;
  comm::CommEngine& engine_of(int id) const { return *lanes_[static_cast<size_t>(lane_of_[static_cast<size_t>(id)])].engine; }

  std::vector<Lane> lanes_;
  std::vector<int> lane_of_;  // per instruction of the active program
  std::vector<JobId> job_;    // per instruction: its job this step (-1)
  // Per lane and job: allgather inputs copied out of their output, and the instruction.
  std::map<std::pair<int, JobId>, Tensor> staging_;
  std::map<std::pair<int, JobId>, int> instr_of_job_;
};

}  // namespace px
