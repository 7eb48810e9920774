// Executor: runs a Graph on one device. It runs only the nodes needed for
// the requested values, allocates each activation when produced and frees it
// right after its last use, and reports the peak of live tensor memory.
// Parameters and inputs are bound by the caller; requested values are
// returned. (The per-rank program executor of the parallel runtime wraps
// this for the local compute of each rank.)
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"

namespace px {

class Executor {
 public:
  Executor(const Graph& graph, std::vector<ValueId> wanted);

  // `bound[v]` holds every param and input the schedule reads (indexed by
  // ValueId; other entries ignored). Returns tensors for `wanted`, in order.
  // `on_ready(v, t)`, if given, is called as soon as each wanted value is
  // computed (before later nodes run): the data-parallel runtime starts
  // reducing a gradient while backward goes on.
  // `before(node)`, if given, is called before each node runs (P3: a
  // parameter's update may still be in flight until the node reading it).
  using ReadyFn = std::function<void(ValueId, const Tensor&)>;
  using BeforeFn = std::function<void(const Node&)>;
  std::vector<Tensor> run(const std::vector<Tensor>& bound, const OpContext& context = {},
                          const ReadyFn& on_ready = {}, const BeforeFn& before = {});

  // When set, run() appends the start and end of every node it runs (for traces).
  struct NodeTiming {
    int node = 0;
    std::chrono::steady_clock::time_point start, end;
  };
  void record_timings(std::vector<NodeTiming>* sink) { timings_ = sink; }

  // Wanted values the caller takes in on_ready (copies them out): they are
  // freed after their last use like activations, and run() returns them
  // undefined. The data-parallel runtime hands gradients over this way, so
  // a gradient's memory lives in its bucket only, not twice until the end.
  void release_after_ready(const std::vector<ValueId>& values);

  // Peak live tensor bytes (process-wide tracker) during the last run().
  int64_t peak_bytes() const { return peak_bytes_; }
  const std::vector<int>& schedule() const { return schedule_; }

 private:
  const Graph& graph_;
  std::vector<ValueId> wanted_;
  std::vector<int> schedule_;                  // node indices, in order
  std::vector<std::vector<ValueId>> frees_;    // per schedule step: values dead after it
  std::vector<bool> keep_;                     // per value: wanted or bound, never freed
  std::vector<bool> wanted_set_;               // per value: wanted
  std::vector<int> last_use_;                  // per value: schedule step of its last read (or production)
  std::vector<std::vector<ValueId>> ready_frees_;  // per schedule step: released wanted values dead after it
  int64_t peak_bytes_ = 0;
  std::vector<NodeTiming>* timings_ = nullptr;
};

}  // namespace px
