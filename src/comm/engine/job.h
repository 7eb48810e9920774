// EngineJob: one collective queued on a CommEngine, and how it is cut into
// slices. Slicing is a pure function of the job and slice_bytes, so ranks
// that submitted equal jobs cut them identically; the signature (kind, sizes,
// reduction, priority, name, slice_bytes) is what the ranks compare to check
// that they did.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "comm/communicator.h"

namespace px::comm {

enum class JobKind { allreduce, reduce_scatter, allgather, custom };

struct EngineJob {
  JobKind kind = JobKind::allreduce;
  int64_t id = 0;
  int priority = 0;
  std::string name;
  Reduction op = Reduction::sum;
  Algorithm algorithm = Algorithm::automatic;  // the job's own (automatic: the engine's options)
  // allreduce: the data, in place. reduce_scatter: the output block.
  // allgather: the whole output.
  std::span<float> data;
  // reduce_scatter: the whole input. allgather: this rank's block.
  std::span<const float> input;
  std::function<void(Communicator&)> work;  // custom
  int64_t custom_bytes = 0;                 // custom: for the trace only
  int64_t count = 0;  // elements of the whole collective (n)

  // Slicing (plan_slices): allreduce slices are `piece` consecutive
  // elements; reduce_scatter/allgather slice k takes elements
  // [k·piece, (k+1)·piece) of every rank's block, so each rank's shard stays
  // block(n, p, rank) of the whole.
  int slices = 1;
  int64_t piece = 0;
  uint64_t signature = 0;

  // Progress (the engine's mutex guards these once the job is queued).
  int next_slice = 0;
  bool done = false;
  std::string error;  // non-empty: failed

  // "allreduce 'grad.3' (1000 elements, priority 2)"
  std::string describe() const;
};

// How a job of `count` elements over `ranks` is cut at `slice_bytes` (0:
// one slice): its slice count and piece (EngineJob's fields). Custom jobs
// run whole. The simulator cuts its replayed jobs by the same rule.
struct SlicePlan {
  int slices = 1;
  int64_t piece = 0;
};
SlicePlan slice_plan(JobKind kind, int64_t count, int64_t slice_bytes, int ranks);

// The agreement rounds (comm/engine/agreement.h) a CommEngine runs for a
// job cut by `plan`: its progress loop exchanges announcements before
// every slice it runs, so one per slice (a rank whose peers have not yet
// submitted runs more, idle ones, while it waits). The lowering stamps it
// on the instruction (parallel::Instr::announcement_rounds).
int announcement_rounds(const SlicePlan& plan);

// Sets slices, piece and signature. slice_bytes 0: one slice.
void plan_slices(EngineJob& job, int64_t slice_bytes, int ranks);

// Runs slice `index` of `job` over `comm`; returns its payload bytes on this
// rank. `staging` is scratch for reduce_scatter/allgather pieces.
int64_t run_slice(EngineJob& job, int index, Communicator& comm,
                  const CollectiveOptions& options, std::vector<float>& staging);

}  // namespace px::comm
