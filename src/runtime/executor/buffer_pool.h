// The Program's flat buffers on this rank (parallel::Buffer, shapes
// [count] of their dtype). Persistent ones (the parameters, their ZeRO
// shard, gradient buckets a caller reads) live as long as the pool from
// their first use, zeroed (a Program reading its parameters from outside,
// ProgramExecutor::use_parameters, never holds the flat copy); the
// others are allocated at an instance's first write (liveness) and freed
// at its Free, or, while an engine job still reads the instance, once
// that job finishes. Per buffer and member the pool knows what this
// instance wrote, so what no one wrote reads as zeros; and it counts the
// gradient and (ZeRO-3) gathered-parameter bucket bytes alive, with their
// peaks (ExecutorMemory).
#pragma once

#include <deque>
#include <vector>

#include "comm/buffer.h"
#include "core/tensor.h"
#include "parallel/program.h"

namespace px {

// Whether an instruction's engine job still runs this step (the collective
// lanes know; collective_lanes.h).
class RunningJobs {
 public:
  virtual bool running(int instr) const = 0;

 protected:
  ~RunningJobs() = default;
};

class BufferPool {
 public:

  // The buffers `layouts` describes: a Program's (every Program a run
  // switches between has the same). Nothing is allocated yet.
  explicit BufferPool(std::vector<parallel::Buffer> layouts);

  // A buffer's storage: undefined while not allocated.
  Tensor& storage(int buffer);
  const Tensor& storage(int buffer) const;
  // A region of an allocated buffer (px::Error naming the buffer if not).
  Tensor view(const parallel::Region& region) const;
  float* data(const parallel::Region& region) const;
  comm::Buffer comm_buffer(const parallel::Region& region) const;  // in its buffer's dtype

  // A new instance of `buffer` (nothing for a persistent one). Before a
  // gradient bucket's, the memory of finished jobs' instances goes: ZeRO's
  // program made this write wait for the reduction that frees the oldest
  // bucket.
  void allocate(int buffer, const RunningJobs& jobs);
  // The instance ends; its buffer id is free for the next one at once.
  // `reader`: the instruction that read it last (-1: none), whose engine
  // job, while it runs, holds its memory.
  void free(int buffer, int reader, const RunningJobs& jobs);
  // Lets go of the held memory whose jobs finished.
  void release_finished(const RunningJobs& jobs);
  bool holds_memory_for_jobs() const { return !held_.empty(); }

  // Per member of `buffer` (one for a buffer without members): written by
  // this instance.
  std::vector<bool>& written(int buffer);
  // Zeros the members this instance did not write, and marks them written.
  void zero_unwritten(int buffer);
  // A step begins: every persistent buffer but `external` (the parameters
  // a Program reads from outside; -1: none) exists, so that it counts from
  // the step's start as the memory ledger counts it; persistent gradient
  // buckets are written anew, and the loss buffer (-1: none) sums from zero.
  void begin_step(int loss_buffer, int external);

  int64_t gradient_peak_bytes() const { return bytes_.gradient_peak; }
  int64_t parameter_peak_bytes() const { return bytes_.parameter_peak; }

 private:
  // A freed instance whose last reader (an engine job) still runs.
  struct Held {
    Tensor tensor;
    parallel::Buffer::Kind kind = parallel::Buffer::Kind::grad_bucket;
    int64_t bytes = 0;
    int reader = -1;  // the instruction whose job holds it
  };
  void uncount(parallel::Buffer::Kind kind, int64_t bytes);  // off the bucket counts
  Tensor allocated(const parallel::Region& region, const char* use) const;
  void materialize(int buffer) const;  // a persistent buffer, at its first use

  std::vector<parallel::Buffer> layouts_;
  // Persistent buffers materialize, zeroed, at their first use, which a
  // const accessor may be (the executor's thread alone uses the pool).
  mutable std::vector<Tensor> tensors_;
  std::vector<std::vector<bool>> written_;
  std::deque<Held> held_;
  // Bytes of gradient and gathered parameter bucket buffers alive, and their peaks.
  struct Bytes {
    int64_t gradients = 0, gradient_peak = 0;
    int64_t parameters = 0, parameter_peak = 0;
  } bytes_;
};

}  // namespace px
